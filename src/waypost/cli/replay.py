"""`waypost replay`: would the code about to be deployed suspend the runs in this database?

It reads (read-only, `store/readonly.py`) the open runs of the workflows the --app
modules define, and a sample of recent finished ones, and replays each on the
version it is pinned to (`waypost.testing.replay`): no activity runs, nothing is
written. Exit 0 if every run matches, 1 if any does not (or cannot be replayed),
2 if the command cannot check at all (a usage error, no database, no modules).
"""

from __future__ import annotations

import json
import os
import sys
import time
from collections import Counter

import click

from waypost.errors import InvalidHistory, WaypostError
from waypost.model.chain import chain_from_environment
from waypost.model.encryption import keys_from_environment
from waypost.model.status import RunStatus
from waypost.runtime.registry import Registry, items_in_modules
from waypost.store.base import RunRecord
from waypost.store.readonly import HistoryReader, open_reader
from waypost.testing.replay import ReplayResult, ReplayStatus, replay_history

from .common import (
    app_option,
    db_option,
    output_option,
)

OPEN = (RunStatus.RUNNING, RunStatus.WAITING, RunStatus.PAUSED, RunStatus.SUSPENDED)
FINISHED = (RunStatus.COMPLETED, RunStatus.FAILED, RunStatus.CANCELLED, RunStatus.TERMINATED)


class CannotCheck(click.ClickException):
    """The check could not be made: exit 2, apart from 1 (a run does not match)."""

    exit_code = 2


@click.command("replay")
@app_option(
    "Module whose workflows to check (repeatable): the code about to be deployed.",
    required=True,
)
@click.option(
    "--workflow",
    "workflows",
    multiple=True,
    help="Check only this workflow (repeatable; default: every workflow the modules define).",
)
@click.option(
    "--limit",
    type=click.IntRange(1, 1_000_000),
    default=10_000,
    show_default=True,
    help="Open runs checked per workflow (the newest).",
)
@click.option(
    "--finished",
    type=click.IntRange(0, 1_000_000),
    default=20,
    show_default=True,
    help="Recent finished runs checked per workflow as well.",
)
@db_option
@click.option("--tenant", default=None, help="Check this tenant's runs [default: default].")
@click.option("--all-tenants", is_flag=True, help="Check the runs of every tenant.")
@output_option("One JSON document on stdout.")
def replay(
    apps: tuple[str, ...],
    workflows: tuple[str, ...],
    limit: int,
    finished: int,
    db: str,
    tenant: str | None,
    all_tenants: bool,
    as_json: bool,
) -> None:
    """Replay stored runs against the code of --app modules; exit 1 on any mismatch.

    Reads the database without writing to it; runs no activity. Each run is
    replayed on the version it is pinned to; a version the modules lack is
    reported, not counted as a mismatch.
    """
    if tenant is not None and all_tenants:
        raise click.UsageError("give --tenant or --all-tenants, not both")
    scope = None if all_tenants else (tenant or "default")
    try:
        registry = Registry()
        for item in items_in_modules(apps):
            registry.add(item)
    except WaypostError as exc:
        raise CannotCheck(str(exc).replace("app module", "--app")) from exc
    names = list(workflows) or registry.workflow_names()
    unknown = [n for n in names if not registry.has_workflow(n)]
    if unknown:
        raise click.UsageError(
            f"--workflow {unknown[0]!r} is not defined by the --app modules "
            f"(they define: {', '.join(registry.workflow_names()) or 'none'})"
        )
    try:
        env = os.environ
        reader = open_reader(db, keys_from_environment(env), chain_from_environment(env))
    except WaypostError as exc:
        raise CannotCheck(str(exc)) from exc
    with reader:
        try:
            results = _check(reader, registry, names, scope, limit, finished, as_json)
        except WaypostError as exc:
            raise CannotCheck(str(exc)) from exc
    counts = Counter(r.status for r in results)
    failed = counts[ReplayStatus.MISMATCH] + counts[ReplayStatus.ERROR]
    summary = {
        "runs": len(results),
        "ok": counts[ReplayStatus.OK],
        "mismatch": counts[ReplayStatus.MISMATCH],
        "error": counts[ReplayStatus.ERROR],
        "skipped": counts[ReplayStatus.SKIPPED],
    }
    if as_json:
        doc = {"results": [r.to_json() for r in results], "summary": summary}
        click.echo(json.dumps(doc, sort_keys=True))
    else:
        click.echo(
            f"{len(results)} runs replayed: {summary['ok']} ok, {summary['mismatch']} "
            f"mismatched, {summary['error']} failed to replay, {summary['skipped']} skipped"
        )
    sys.exit(1 if failed else 0)


def _runs(
    reader: HistoryReader, name: str, tenant: str | None, statuses: tuple[RunStatus, ...], n: int
) -> list[RunRecord]:
    """The newest `n` runs of `name` in any of `statuses`."""
    if n == 0:
        return []
    found = [r for s in statuses for r in reader.list_runs(tenant, s.value, name, n)]
    found.sort(key=lambda r: (-r.created_at, r.tenant, r.run_id))
    return found[:n]


def _check(
    reader: HistoryReader,
    registry: Registry,
    names: list[str],
    tenant: str | None,
    limit: int,
    finished: int,
    quiet: bool,
) -> list[ReplayResult]:
    runs = [
        run
        for name in names
        for run in _runs(reader, name, tenant, OPEN, limit)
        + _runs(reader, name, tenant, FINISHED, finished)
    ]
    results = []
    shown = time.monotonic()
    for i, run in enumerate(runs, 1):
        result = _replay_one(reader, registry, run)
        if result is None:
            continue  # gone since it was listed
        results.append(result)
        if not quiet:
            click.echo(result.line())
        if time.monotonic() - shown > 2.0:
            shown = time.monotonic()
            click.echo(f"replayed {i} of {len(runs)} runs", err=True)
    return results


def _replay_one(reader: HistoryReader, registry: Registry, run: RunRecord) -> ReplayResult | None:
    stored, history = reader.load_run(run.tenant, run.run_id)
    if stored is None:
        return None
    try:
        result = replay_history(
            registry,
            history,
            processed_seq=stored.processed_seq,
            run_id=stored.run_id,
            tenant=stored.tenant,
        )
    except InvalidHistory as exc:
        return ReplayResult(
            stored.run_id,
            stored.workflow,
            stored.version,
            ReplayStatus.ERROR,
            len(history),
            note=f"the stored history cannot be replayed: {exc}",
            tenant=stored.tenant,
        )
    return result
