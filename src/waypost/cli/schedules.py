"""The `waypost schedules` commands: create, list, show, pause, resume, delete and
backfill a tenant's schedules (the engines that serve fire them)."""

from __future__ import annotations

import json
from typing import Any

import click

from waypost.client.sync import Engine
from waypost.model.schedules import Backfilled, ScheduleInfo

from .common import (
    db_option,
    dump,
    echo_found,
    json_option,
    list_command,
    open_engine,
    output_option,
    record_commands,
)

tenant_option = click.option("--tenant", default="default", show_default=True)


COLUMNS = ("SCHEDULE ID", "WORKFLOW", "WHEN", "OVERLAP", "STATE")


def _row(info: ScheduleInfo) -> tuple[str, ...]:
    when = f"every {info.every:g}s" if info.every is not None else f"{info.cron!r} in {info.tz}"
    state = "paused" if info.paused else f"next {info.to_dict()['next_fire']}"
    return (info.schedule_id, info.workflow, when, info.overlap, state)


def _line(info: ScheduleInfo) -> str:
    return "  ".join(_row(info))


def _input(text: str | None) -> Any:
    if text is None:
        return None
    try:
        return json.loads(text)
    except (ValueError, RecursionError) as exc:
        raise click.BadParameter(f"not JSON: {exc}", param_hint="--input") from None


@click.group()
def schedules() -> None:
    """Schedules: runs of a workflow started on a cron expression or an interval."""


@schedules.command("create")
@click.argument("schedule_id")
@click.argument("workflow")
@click.option("--cron", help="Five cron fields, e.g. '0 9 * * MON-FRI'.")
@click.option("--tz", help="The cron's time zone, e.g. Europe/Madrid (default UTC).")
@click.option("--every", type=float, help="Or: an interval, in seconds.")
@click.option("--input", "input_json", help="Each run's input, as JSON.")
@click.option("--version", help="The workflow's version (default: the newest).")
@click.option(
    "--overlap",
    default="skip",
    show_default=True,
    help="While the previous run runs: skip, buffer_one, allow_all, cancel_previous.",
)
@click.option("--catchup", default="last", show_default=True, help="Missed fires: none, last, all.")
@click.option(
    "--catchup-window", type=float, default=86400.0, show_default=True, help="Seconds, for all."
)
@tenant_option
@json_option
@db_option
def schedules_create(
    schedule_id: str,
    workflow: str,
    cron: str | None,
    tz: str | None,
    every: float | None,
    input_json: str | None,
    version: str | None,
    overlap: str,
    catchup: str,
    catchup_window: float,
    tenant: str,
    as_json: bool,
    db: str,
) -> None:
    """Make SCHEDULE_ID, starting runs of WORKFLOW."""
    with open_engine(db) as engine:
        made = engine.schedule(
            workflow,
            id=schedule_id,
            cron=cron,
            tz=tz,
            every=every,
            input=_input(input_json),
            version=version,
            overlap=overlap,
            catchup=catchup,
            catchup_window=catchup_window,
            tenant=tenant,
        )
    click.echo(dump(made.to_dict()) if as_json else _line(made))


list_command(
    schedules,
    "List the schedules of a tenant.",
    Engine.schedules,
    COLUMNS,
    _row,
    to_json=ScheduleInfo.to_dict,
    none="no schedules in tenant {tenant}",
    options=(tenant_option, json_option, db_option),
)


@schedules.command("show")
@click.argument("schedule_id")
@tenant_option
@output_option("Print JSON, what it prints by default.", default="json")
@db_option
def schedules_show(schedule_id: str, tenant: str, as_json: bool, db: str) -> None:
    """Show SCHEDULE_ID: as JSON, or a table with --output table."""
    with open_engine(db, must_exist=True) as engine:
        info = engine.describe_schedule(schedule_id, tenant=tenant)
    if as_json:
        click.echo(dump(info.to_dict()))
        return
    echo_found([info], False, ScheduleInfo.to_dict, COLUMNS, _row, "")


def _its_line(_: str, info: ScheduleInfo) -> str:
    return _line(info)


record_commands(
    schedules,
    "schedule_id",
    tenant_option,
    ("pause", Engine.pause_schedule, _its_line, "Stop SCHEDULE_ID firing; its runs go on."),
    ("resume", Engine.resume_schedule, _its_line, "Fire SCHEDULE_ID again, from now on."),
    (
        "delete",
        Engine.delete_schedule,
        "schedule {} deleted",
        "Delete SCHEDULE_ID; the runs it started go on.",
    ),
)


@schedules.command("trigger")
@click.argument("schedule_id")
@click.option(
    "--overlap",
    default="schedule",
    show_default=True,
    help="schedule (the schedule's policy against its last run), allow_all, skip or "
    "cancel_previous.",
)
@tenant_option
@output_option("Print JSON, what it prints by default.", default="json")
@db_option
def schedules_trigger(schedule_id: str, overlap: str, tenant: str, as_json: bool, db: str) -> None:
    """Start SCHEDULE_ID's run now (JSON: the fire and its run, null where skipped;
    --output table: a row, - where skipped); its regular fires go on as they were."""
    with open_engine(db, must_exist=True) as engine:
        done = engine.trigger_schedule(schedule_id, overlap=overlap, tenant=tenant)
    _fires(done, as_json, "nothing fired")


@schedules.command("backfill")
@click.argument("schedule_id")
@click.option("--start", required=True, help="ISO 8601 with a zone: 2026-06-01T00:00:00Z.")
@click.option("--end", required=True, help="ISO 8601 with a zone.")
@click.option(
    "--overlap",
    default="allow_all",
    show_default=True,
    help="The backfill's own policy between its runs: allow_all, skip, cancel_previous, "
    "or schedule (the schedule's; buffer_one skips). Regular fires' runs do not count.",
)
@tenant_option
@output_option("Print JSON, what it prints by default.", default="json")
@db_option
def schedules_backfill(
    schedule_id: str, start: str, end: str, overlap: str, tenant: str, as_json: bool, db: str
) -> None:
    """Start the runs of SCHEDULE_ID's fire times in [--start, --end] (JSON: each fire and
    its run, null where skipped; --output table: a row each, - where skipped)."""
    with open_engine(db, must_exist=True) as engine:
        done = engine.backfill_schedule(schedule_id, start, end, overlap=overlap, tenant=tenant)
    _fires(done, as_json, "no fire times in the range")


def _fires(done: Backfilled, as_json: bool, none: str) -> None:
    """A backfill's or trigger's fires: JSON, or a table of fire times and runs."""
    if as_json:
        click.echo(dump(done.to_dict()))
        return
    rows = [(at, run or "-") for at, run in done.fires]
    echo_found(rows, False, list, ("FIRE AT", "RUN ID"), list, none)
