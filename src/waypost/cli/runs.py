"""The `waypost runs` commands written by hand (list, show, history, verify) and the
top-level run commands `start` (also `runs start`), `signal` and `cancel`. The
assembly (`main.py`) adds them, and the other modules' run commands, to their groups."""

from __future__ import annotations

import json
import sys
from typing import Any

import click

from waypost.errors import InvalidRequest
from waypost.model.definitions.format import parse_duration
from waypost.model.operations_runs import MAX_HISTORY_PAGE
from waypost.model.operations_start import run_timeout_seconds
from waypost.model.records import RunInfo

from .common import (
    app_option,
    check_cancel_grace,
    db_option,
    dump,
    exit_with_problems,
    json_option,
    json_value,
    load_apps,
    open_engine,
    output_option,
    record_json,
    tenant_option,
)
from .output import run_words, runs_table, show, timeline


@click.group()
def runs() -> None:
    """Start and inspect runs; move waiting definition runs to another version."""


@click.command()
@click.argument("workflow")
@click.argument("payload", required=False)
@app_option("Module defining the workflow (not needed for a published definition).")
@click.option(
    "--version",
    "version",
    default=None,
    help="The version to start: a definition's version number (default: the newest).",
)
@click.option("--run-id", default=None, help="The run's id (starting it again is harmless).")
@click.option(
    "--started-by", default=None, help="Who starts it (may not approve it; default: the OS user)."
)
@click.option(
    "--concurrency-key",
    default=None,
    help="A key (a customer's id): a queue's key concurrency bounds its runs' attempts.",
)
@click.option(
    "--dedup-id",
    default=None,
    help="While a run started with this id has not finished, print that run's id instead.",
)
@click.option(
    "--queue",
    default=None,
    help="A workflow queue: the run is enqueued until the queue's limits admit it.",
)
@click.option(
    "--run-timeout",
    default=None,
    callback=lambda ctx, param, value: _duration(ctx, param, value),
    help="Seconds or an ISO-8601 duration (PT30M): a run that has not ended that long "
    "after its start fails (RunTimedOut). Default: the workflow's own run_timeout.",
)
@db_option
@tenant_option
def start(
    workflow: str,
    payload: str | None,
    apps: tuple[str, ...],
    version: str | None,
    run_id: str | None,
    started_by: str | None,
    concurrency_key: str | None,
    dedup_id: str | None,
    queue: str | None,
    run_timeout: float | None,
    db: str,
    tenant: str,
) -> None:
    """Start a run of WORKFLOW with a JSON PAYLOAD; prints the run id (workers run it).

    WORKFLOW is a workflow of an --app module or, if none has that name, a
    definition the tenant published.
    """
    from waypost.model.definitions import InputError

    value = json_value(payload, "PAYLOAD")
    with open_engine(db) as engine:
        engine.register(*load_apps(apps))
        try:
            handle = engine.start(
                workflow,
                value,
                run_id=run_id,
                tenant=tenant,
                version=version,
                started_by=started_by,
                concurrency_key=concurrency_key,
                dedup_id=dedup_id,
                queue=queue,
                run_timeout=run_timeout,
            )
        except InputError as exc:
            head = (
                f"the input does not satisfy definition {exc.name!r}: {len(exc.problems)} "
                "problem(s); nothing started"
            )
            exit_with_problems(head, exc.problems, "(input)")
        except InvalidRequest as exc:  # a malformed version, run id, tenant or principal
            raise click.UsageError(str(exc)) from exc
        click.echo(handle.run_id)


def _duration(ctx: click.Context, param: click.Parameter, value: str | None) -> float | None:
    """--run-timeout: a positive number of seconds or an ISO-8601 duration."""
    if value is None:
        return None
    try:
        seconds = float(value) if value[:1].isdigit() else parse_duration(value)
    except ValueError as exc:
        raise click.BadParameter(str(exc), ctx=ctx, param=param) from None
    try:
        return run_timeout_seconds(seconds, "--run-timeout")
    except InvalidRequest as exc:
        raise click.BadParameter(str(exc), ctx=ctx, param=param) from None


@runs.command("list")
@db_option
@click.option("--tenant", default=None, help="Only this tenant (default: all).")
@click.option("--status", default=None, help="Only runs with this status.")
@click.option("--workflow", default=None, help="Only runs of this workflow.")
@click.option("--limit", type=int, default=50, show_default=True)
@json_option
def runs_list(
    db: str, tenant: str | None, status: str | None, workflow: str | None, limit: int, as_json: bool
) -> None:
    """List runs, newest first: a table (coloured on a terminal unless NO_COLOR is set)."""
    with open_engine(db, must_exist=True) as engine:
        try:
            infos = engine.list_runs(tenant=tenant, status=status, workflow=workflow, limit=limit)
        except ValueError as exc:
            raise click.ClickException(str(exc)) from exc
    if as_json:
        click.echo(dump([_info_json(i) for i in infos]))
        return
    if not infos:
        click.echo("no runs", err=True)
        return
    show(runs_table(infos))


def _info_json(info: RunInfo) -> dict[str, Any]:
    return record_json(
        info,
        "tenant",
        "run_id",
        "workflow",
        "version",
        "status",
        "error",
        "waiting_for",
        "created_at",
        "updated_at",
        "finished_at",
        "next_action",
        "parent",
        "children",
        result=info.result,  # the workflow's value, as it is
        events=info.last_seq,
    )


@runs.command("show")
@click.argument("run_id")
@db_option
@tenant_option
@output_option("Print the run's snapshot as JSON.")
def runs_show(run_id: str, db: str, tenant: str, as_json: bool) -> None:
    """Show one run in words: its status, what it waits on and what happens next, the
    current step's attempt, last error and next retry, then a timeline of its history."""
    with open_engine(db, must_exist=True) as engine:
        info = engine.get(run_id, tenant=tenant)
        events = [] if as_json else engine.history(run_id, tenant=tenant)
    if as_json:
        click.echo(dump(_info_json(info)))
        return
    show(*run_words(info, events))


@runs.command("history")
@click.argument("run_id")
@click.option("--after", type=click.IntRange(min=0), default=0, help="Start after this event.")
@click.option(
    "--limit", type=click.IntRange(min=1), default=None, help="Print at most this many events."
)
@db_option
@tenant_option
@output_option("One JSON event a line, what it prints by default.", default="json")
def runs_history(
    run_id: str, after: int, limit: int | None, db: str, tenant: str, as_json: bool
) -> None:
    """Print a run's history, one JSON event per line (or a table with --output table):
    read a page at a time, so a long history is never held whole."""
    left = limit
    with open_engine(db, must_exist=True) as engine:
        next_after: int | None = after
        while next_after is not None and (left is None or left > 0):
            size = MAX_HISTORY_PAGE if left is None else min(left, MAX_HISTORY_PAGE)
            page = engine.history_page(run_id, after_seq=next_after, limit=size, tenant=tenant)
            if not as_json:  # a table a page, its header over the first
                rows = timeline(page.events, limit=0)
                rows.show_header = next_after == after
                show(rows)
            for ev in page.events if as_json else ():
                line: dict[str, Any] = {
                    "seq": ev.seq,
                    "type": ev.type,
                    "time": ev.time.isoformat(),
                    "data": ev.data,
                }
                if ev.undecodable:  # damaged or edited: `runs verify` says more
                    line["undecodable"] = True
                click.echo(json.dumps(line, sort_keys=True))
            left = None if left is None else left - len(page.events)
            next_after = page.next_after


@runs.command("verify")
@click.argument("run_id")
@db_option
@tenant_option
def runs_verify(run_id: str, db: str, tenant: str) -> None:
    """Check a run's hash chain and the rows beside it; exit 1 if any event was changed,
    removed or reordered, the history belongs to another run, or the run's row or an
    approval's row was edited or disagrees with the history.

    With chain keys (WAYPOST_CHAIN_KEYS or WAYPOST_CHAIN_KEYS_FILE), every event and
    row must carry a valid HMAC under one of them; without, plain hashes are checked.
    """
    with open_engine(db, must_exist=True) as engine:
        problems = engine.verify(run_id, tenant=tenant)
        mode = engine.aio.settings.chain.describe()
    if problems:
        for p in problems:
            click.echo(f"event {p.seq}: {p.problem}" if p.seq else p.problem, err=True)
        sys.exit(1)
    click.echo(f"{run_id}: history intact ({mode})")


@click.command()
@click.argument("run_id")
@click.argument("name")
@click.argument("payload", required=False)
@db_option
@tenant_option
def signal(run_id: str, name: str, payload: str | None, db: str, tenant: str) -> None:
    """Send signal NAME to a run, with an optional JSON PAYLOAD."""
    value = json_value(payload, "PAYLOAD")
    with open_engine(db, must_exist=True) as engine:
        engine.signal(run_id, name, value, tenant=tenant)
    click.echo(f"signal {name!r} sent to {run_id}")


@click.command()
@click.argument("run_id")
@click.option("--reason", required=True, help="Why the run is cancelled (recorded in its history).")
@click.option(
    "--grace",
    default="30",
    show_default=True,
    callback=check_cancel_grace,
    help="Seconds the run's clean-up may take before it ends cancelled anyway, or 'none'.",
)
@db_option
@tenant_option
def cancel(run_id: str, reason: str, grace: float | None, db: str, tenant: str) -> None:
    """Ask a run to stop; it ends `cancelled` (within the grace, whatever its code does)."""
    with open_engine(db, must_exist=True, cancel_grace=grace) as engine:
        engine.cancel(run_id, reason, tenant=tenant)
    click.echo(f"cancellation of {run_id} requested")
