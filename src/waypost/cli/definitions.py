"""The `waypost definitions` commands and `waypost runs migrate`."""

from __future__ import annotations

import json
import sys
from typing import Any

import click

from waypost.client.sync import Engine
from waypost.errors import WaypostError
from waypost.model.records import DefinitionInfo, MigrationReport

from .common import (
    db_option,
    dump,
    echo_found,
    exit_with_problems,
    json_option,
    list_command,
    open_engine,
    output_option,
    record_json,
    tenant_option,
)

NO_REASON = "no reason given (waypost runs migrate without --reason)"


@click.group()
def definitions() -> None:
    """Workflows defined as data (YAML or JSON)."""


@definitions.command("schema")
def definitions_schema() -> None:
    """Print the JSON Schema of definitions (for editors to validate and complete)."""
    from waypost.model.definitions import definition_schema

    click.echo(json.dumps(definition_schema(), indent=2, sort_keys=True))


@definitions.command("validate")
@click.argument("file", type=click.Path(allow_dash=True))
@click.option(
    "--max-steps",
    type=click.IntRange(min=1),
    default=None,
    help="The tenant's step limit (default 20).",
)
def definitions_validate(file: str, max_steps: int | None) -> None:
    """Check FILE (YAML or JSON; - for stdin); list every problem with its location."""
    from waypost.model.definitions import DefinitionError, Limits, parse_definition

    limits = Limits() if max_steps is None else Limits(max_steps=max_steps)
    source = _read_source(file, limits.max_definition_bytes)
    try:
        definition = parse_definition(source, limits=limits)
    except DefinitionError as exc:
        exit_with_problems(f"{file}: {len(exc.problems)} problem(s)", exc.problems, "(top)")
    steps = len(definition.all_steps)
    click.echo(f"{file}: valid: {definition.name}, {steps} steps, digest {definition.digest}")


def _read_source(file: str, limit: int) -> bytes:
    """The bytes of FILE (stdin for -), at most `limit`: decoding them is the parser's job.

    Read as bytes so that a file that is not UTF-8 is a problem the parser
    reports like any other, and never more than the limit, whatever FILE is.
    """
    try:
        if file == "-":
            data = sys.stdin.buffer.read(limit + 1)
        else:
            with open(file, "rb") as handle:
                data = handle.read(limit + 1)
    except OSError as exc:
        raise click.ClickException(f"cannot read {file}: {exc.strerror or exc}") from None
    if len(data) > limit:
        raise click.ClickException(
            f"{file} is larger than {limit} bytes, the most a definition may have"
        )
    return data


def _definition_json(d: DefinitionInfo) -> dict[str, Any]:
    return record_json(d, "name", "version", "digest", "tenant", "published_at", "published_by")


COLUMNS = ("NAME", "VERSION", "DIGEST", "PUBLISHED", "BY")


def _row(d: DefinitionInfo) -> tuple[str, ...]:
    when = d.published_at.isoformat(timespec="seconds")
    return (d.name, f"v{d.version}", d.digest[:16], when, d.published_by or "-")


@definitions.command("publish")
@click.argument("file", type=click.Path(allow_dash=True))
@click.option("--by", default=None, help="Who publishes (recorded).")
@db_option
@tenant_option
def definitions_publish(file: str, by: str | None, db: str, tenant: str) -> None:
    """Validate FILE and publish it as the next immutable version (identical: the same)."""
    from waypost.model.definitions import DefinitionError, Limits

    source = _read_source(file, Limits().max_definition_bytes)
    with open_engine(db) as engine:
        try:
            info = engine.publish(source, tenant=tenant, by=by)
        except DefinitionError as exc:
            head = f"{file}: {len(exc.problems)} problem(s); nothing published"
            exit_with_problems(head, exc.problems, "(top)")
    what = "published" if info.created else "unchanged: already published as"
    click.echo(f"{what} {info.name} version {info.version} (digest {info.digest})")
    for warning in info.warnings:
        click.echo(f"warning: {warning}", err=True)


list_command(
    definitions,
    "List published definitions and their versions.",
    Engine.definitions,
    COLUMNS,
    _row,
    to_json=_definition_json,
    none="no definitions",
    options=(json_option, db_option, tenant_option),
)


@definitions.command("show")
@click.argument("name")
@click.option("--version", "version", type=int, default=None, help="Default: the newest.")
@output_option("Print JSON, what it prints by default.", default="json")
@db_option
@tenant_option
def definitions_show(name: str, version: int | None, as_json: bool, db: str, tenant: str) -> None:
    """Show a published definition: as JSON, with its canonical form, or its row of
    `definitions list` with --output table."""
    with open_engine(db, must_exist=True) as engine:
        try:
            info = engine.definition(name, version, tenant=tenant)
        except LookupError as exc:
            raise click.ClickException(str(exc)) from exc
    if not as_json:
        echo_found([info], False, _definition_json, COLUMNS, _row, "")
        return
    click.echo(dump({**_definition_json(info), "definition": info.body}))


@click.command("migrate")
@click.argument("run_id", required=False)
@click.option(
    "--all",
    "definition",
    default=None,
    metavar="DEFINITION",
    help="Instead of RUN_ID: every unfinished run of DEFINITION on version --from.",
)
@click.option(
    "--from",
    "from_version",
    type=click.IntRange(min=1),
    default=None,
    help="With --all: the version the runs are on.",
)
@click.option(
    "--to",
    "to_version",
    type=click.IntRange(min=1),
    required=True,
    help="The version of the definition to move to.",
)
@click.option(
    "--map",
    "mappings",
    multiple=True,
    metavar="OLD=NEW",
    help="A run waiting at step OLD goes on at step NEW of the new version (repeatable; "
    "default: the step of the same id).",
)
@click.option("--dry-run", is_flag=True, help="Only check and report; change nothing.")
@click.option(
    "--reason",
    default=None,
    help="Why the runs are moved (recorded in each run's history; without it the record "
    f"says {NO_REASON!r}).",
)
@click.option("--by", default=None, help="Who moves them (recorded; default: the OS user).")
@output_option("Print the report(s) as JSON.")
@db_option
@tenant_option
def runs_migrate(
    run_id: str | None,
    definition: str | None,
    from_version: int | None,
    to_version: int,
    mappings: tuple[str, ...],
    dry_run: bool,
    reason: str | None,
    by: str | None,
    as_json: bool,
    db: str,
    tenant: str,
) -> None:
    """Move a waiting definition run (or --all of one version) to version --to.

    Each run is checked first: it must wait at a top-level approval or wait
    step, and the new version must be able to go on from the (mapped) step with
    the run's data. Exit 0 when every run can be moved (and was, unless
    --dry-run), 1 when any cannot.
    """
    if (run_id is None) == (definition is None):
        raise click.UsageError("give either RUN_ID or --all DEFINITION")
    if definition is not None and from_version is None:
        raise click.UsageError("--all needs --from: the version the runs are on")
    if run_id is not None and from_version is not None:
        raise click.UsageError("--from goes with --all; a single run is on its own version")
    mapping = _step_mapping(mappings)
    if not dry_run and not (reason or "").strip():
        click.echo(f"note: no --reason given; the history will say {NO_REASON!r}", err=True)
        reason = NO_REASON
    how: dict[str, Any] = {"reason": reason or "", "by": by, "dry_run": dry_run, "tenant": tenant}
    with open_engine(db, must_exist=True) as engine:
        try:
            if run_id is not None:
                reports = [engine.migrate(run_id, to_version, mapping, **how)]
            else:
                assert definition is not None
                assert from_version is not None
                reports = engine.migrate_all(definition, from_version, to_version, mapping, **how)
        except WaypostError:
            raise
        except (LookupError, ValueError) as exc:  # no such version; a mapping that cannot be
            raise click.ClickException(str(exc)) from exc
    if as_json:
        found = [r.to_json() for r in reports]
        click.echo(dump(found[0] if run_id is not None else found))
    else:
        for report in reports:
            _echo_migration(report)
        if definition is not None:
            click.echo(_migration_summary(reports, definition, from_version))
    if not all(r.compatible and (r.migrated or r.dry_run) for r in reports):
        sys.exit(1)


def _step_mapping(pairs: tuple[str, ...]) -> dict[str, str]:
    mapping: dict[str, str] = {}
    for pair in pairs:
        old, sep, new = pair.partition("=")
        old, new = old.strip(), new.strip()
        if not sep or not old or not new or "=" in new:
            raise click.BadParameter(
                f"{pair!r} is not OLD=NEW (old step id = new step id)", param_hint="--map"
            )
        if mapping.get(old, new) != new:
            raise click.BadParameter(
                f"step {old!r} is mapped twice ({mapping[old]!r} and {new!r})",
                param_hint="--map",
            )
        mapping[old] = new
    return mapping


def _echo_migration(r: MigrationReport) -> None:
    def at(version: int | None, step: str | None) -> str:
        shown = f"version {version if version is not None else '?'}"
        return f"{shown}, step {step}" if step else shown

    click.echo(f"{r.run_id} ({r.definition or 'not a definition run'})")
    click.echo(f"  {at(r.from_version, r.from_step)} -> {at(r.to_version, r.to_step)}")
    fit = "compatible" if r.compatible else "not compatible"
    done = "migrated" if r.migrated else "dry run, nothing changed" if r.dry_run else "not migrated"
    click.echo(f"  {fit}; {done}")
    for reason in r.reasons:
        click.echo(f"  reason: {reason}")
    for note in r.notes:
        click.echo(f"  note: {note}")


def _migration_summary(
    reports: list[MigrationReport], definition: str, from_version: int | None
) -> str:
    if not reports:
        return f"no unfinished runs of {definition} version {from_version}"
    migrated = sum(r.migrated for r in reports)
    movable = sum(r.compatible and not r.migrated for r in reports)
    refused = sum(not r.compatible for r in reports)
    parts = [
        f"{count} {what}"
        for count, what in (
            (migrated, "migrated"),
            (movable, "compatible" if reports[0].dry_run else "not migrated"),
            (refused, "not compatible"),
        )
        if count
    ]
    runs = f"{len(reports)} run{'s' if len(reports) != 1 else ''}"
    tail = " (dry run, nothing changed)" if reports[0].dry_run else ""
    return f"{runs}: {', '.join(parts)}{tail}"
