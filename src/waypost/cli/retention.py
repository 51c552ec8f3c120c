"""`waypost runs purge` and `waypost runs purged`: retention of finished runs.

`runs purge` purges in batches of 500 runs (one transaction each, so the engines
serving the database are never held up long), printing a progress line per batch
on stderr and the totals on stdout.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

import click

from waypost.model.operations import MAX_RETENTION_SECONDS, PURGE_BATCH
from waypost.model.records import PurgedRun

from .common import (
    db_option,
    dump,
    duration_seconds,
    echo_found,
    open_engine,
    output_option,
    record_json,
    tenant_option,
)


def parse_age(text: str) -> int:
    """`--older-than`: a whole number and a unit (`90m`, `12h`, `30d`, `2w`), in seconds."""
    seconds = duration_seconds(text, 9)
    if seconds is None:
        raise click.BadParameter(
            "give a duration: a whole number and a unit s, m, h, d or w (30d, 12h, 2w)",
            param_hint="--older-than",
        )
    if seconds > MAX_RETENTION_SECONDS:
        raise click.BadParameter("at most a century (36600d)", param_hint="--older-than")
    return seconds


def _age(ctx: click.Context, param: click.Parameter, value: str) -> int:
    return parse_age(value)


def purged_json(p: PurgedRun) -> dict[str, Any]:
    return record_json(
        p,
        "tenant",
        "run_id",
        "workflow",
        "version",
        "status",
        "created_at",
        "finished_at",
        "last_hash",
        "purged_at",
        "purged_by",
        "reason",
        events=p.last_seq,
    )


@click.command("purge")
@click.option(
    "--older-than",
    "older_than",
    required=True,
    callback=_age,
    metavar="AGE",
    help="Purge runs that finished longer ago than this (30d, 12h, 2w).",
)
@click.option("--dry-run", is_flag=True, help="Count what would be purged; write nothing.")
@click.option(
    "--limit", type=click.IntRange(1, 1_000_000), default=None, help="At most this many runs."
)
@click.option("--reason", default=None, help="Kept with each purged run's summary.")
@db_option
@tenant_option
def runs_purge(
    older_than: int, dry_run: bool, limit: int | None, reason: str | None, db: str, tenant: str
) -> None:
    """Purge the tenant's finished runs (completed, failed, cancelled, terminated) older
    than AGE: each leaves a summary (`waypost runs purged`), everything else of it goes."""
    with open_engine(db, must_exist=True) as engine:
        if dry_run:
            report = engine.purge_runs(older_than, dry_run=True, limit=limit, tenant=tenant)
            click.echo(
                f"would purge {report.runs} runs ({report.events} events) of tenant {tenant} "
                f"that finished before {report.cutoff.isoformat()}"
            )
            return
        totals = {"runs": 0, "events": 0, "approvals": 0, "outbox": 0}
        batch = 0
        while limit is None or totals["runs"] < limit:
            size = PURGE_BATCH if limit is None else min(PURGE_BATCH, limit - totals["runs"])
            report = engine.purge_runs(older_than, limit=size, reason=reason, tenant=tenant)
            batch += 1
            for name in totals:
                totals[name] += getattr(report, name)
            click.echo(f"batch {batch}: {report.runs} runs, {report.events} events", err=True)
            if report.runs < size:
                break
    click.echo(
        f"purged {totals['runs']} runs ({totals['events']} events, {totals['approvals']} "
        f"approvals, {totals['outbox']} outbox messages) of tenant {tenant}"
    )


PURGED_COLUMNS = ("RUN ID", "WORKFLOW", "STATUS", "FINISHED", "PURGED", "BY", "REASON", "EVENTS")


def _purged_row(p: PurgedRun) -> tuple[Any, ...]:
    def when(value: datetime | None) -> str:
        return value.isoformat(timespec="seconds") if value is not None else "-"

    return (
        p.run_id,
        f"{p.workflow}@{p.version}",
        p.status.value,
        when(p.finished_at),
        when(p.purged_at),
        p.purged_by or "-",
        p.reason or "-",
        p.last_seq,
    )


@click.command("purged")
@click.argument("run_id", required=False)
@click.option("--limit", type=click.IntRange(1, 10_000), default=50, show_default=True)
@output_option("Print JSON, what it prints by default.", default="json")
@db_option
@tenant_option
def runs_purged(run_id: str | None, limit: int, as_json: bool, db: str, tenant: str) -> None:
    """Show the summary a purged run left (RUN_ID), or the latest summaries: as JSON, or a
    table with --output table."""
    with open_engine(db, must_exist=True) as engine:
        if run_id is not None:
            found = [engine.purged_run(run_id, tenant=tenant)]
        else:
            found = engine.purged_runs(limit=limit, tenant=tenant)
    if as_json:
        click.echo(
            dump([purged_json(p) for p in found] if run_id is None else purged_json(found[0]))
        )
        return
    echo_found(found, False, purged_json, PURGED_COLUMNS, _purged_row, "no purged runs")
