"""The `waypost schedules` commands: create, list, show, pause, resume, delete and
backfill a tenant's schedules (the engines that serve fire them)."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any, TypeVar

import click

from waypost.client.sync import Engine
from waypost.model.schedules import Backfilled, ScheduleInfo

from .common import (
    answer_command,
    db_option,
    dump,
    echo_found,
    json_first_option,
    json_option,
    list_command,
    open_engine,
    record_commands,
)

T = TypeVar("T")
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
    input_json: str | None,
    tenant: str,
    as_json: bool,
    db: str,
    **options: Any,
) -> None:
    """Make SCHEDULE_ID, starting runs of WORKFLOW."""
    # The other options are named as `Engine.schedule`'s parameters: `options`.
    with open_engine(db) as engine:
        made = engine.schedule(
            workflow, id=schedule_id, input=_input(input_json), tenant=tenant, **options
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


def _echo_info(info: ScheduleInfo, as_json: bool, **_: str) -> None:
    if as_json:
        click.echo(dump(info.to_dict()))
        return
    echo_found([info], False, ScheduleInfo.to_dict, COLUMNS, _row, "")


def _on_schedule(method: Callable[..., T]) -> Callable[..., T]:
    """`method` of the engine called with SCHEDULE_ID first, then the other options."""
    return lambda engine, schedule_id, **given: method(engine, schedule_id, **given)


answer_command(
    schedules,
    "show",
    "Show SCHEDULE_ID: as JSON, or a table with --output table.",
    _on_schedule(Engine.describe_schedule),
    _echo_info,
    (click.argument("schedule_id"), tenant_option, json_first_option, db_option),
)


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


def _fires_command(
    name: str, doc: str, fire: Callable[..., Backfilled], none: str, *options: Any
) -> None:
    """`schedules trigger` or `schedules backfill`: `fire` starts the runs of some of
    SCHEDULE_ID's fire times; the fires and their runs are printed as JSON, or a table of
    fire times and runs (`none` when there are none)."""

    def echo(done: Backfilled, as_json: bool, **_: Any) -> None:
        if as_json:
            click.echo(dump(done.to_dict()))
            return
        rows = [(at, run or "-") for at, run in done.fires]
        echo_found(rows, False, list, ("FIRE AT", "RUN ID"), list, none)

    shown = (click.argument("schedule_id"), *options, tenant_option, json_first_option, db_option)
    answer_command(schedules, name, doc, _on_schedule(fire), echo, shown)


_fires_command(
    "trigger",
    """Start SCHEDULE_ID's run now (JSON: the fire and its run, null where skipped;
    --output table: a row, - where skipped); its regular fires go on as they were.""",
    Engine.trigger_schedule,
    "nothing fired",
    click.option(
        "--overlap",
        default="schedule",
        show_default=True,
        help="schedule (the schedule's policy against its last run), allow_all, skip or "
        "cancel_previous.",
    ),
)
_fires_command(
    "backfill",
    """Start the runs of SCHEDULE_ID's fire times in [--start, --end] (JSON: each fire and
    its run, null where skipped; --output table: a row each, - where skipped).""",
    Engine.backfill_schedule,
    "no fire times in the range",
    click.option("--start", required=True, help="ISO 8601 with a zone: 2026-06-01T00:00:00Z."),
    click.option("--end", required=True, help="ISO 8601 with a zone."),
    click.option(
        "--overlap",
        default="allow_all",
        show_default=True,
        help="The backfill's own policy between its runs: allow_all, skip, cancel_previous, "
        "or schedule (the schedule's; buffer_one skips). Regular fires' runs do not count.",
    ),
)
