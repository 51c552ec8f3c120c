"""The `waypost queues` commands: a tenant's named queues, their limits and their load."""

from __future__ import annotations

import re
from typing import Any

import click

from waypost.client.sync import Engine
from waypost.model.operations_queues import KEEP
from waypost.model.queues import QueueInfo

from .common import (
    UNIT_SECONDS,
    answer_command,
    db_option,
    dump,
    json_option,
    open_engine,
    output_option,
    tenant_option,
)

_RATE = re.compile(r"([0-9]{1,7})/([0-9]{0,9}(?:\.[0-9]{1,6})?)([smhd]?)")
NONE = "none"


def _concurrency(ctx: click.Context, param: click.Parameter, value: str | None) -> Any:
    if value is None:
        return KEEP
    if value.strip() == NONE:
        return None
    if not re.fullmatch(r"[0-9]{1,9}", value.strip()):
        raise click.BadParameter(f"{value!r}: give a whole number, or 'none' for no limit")
    return int(value)


def _rate(ctx: click.Context, param: click.Parameter, value: str | None) -> Any:
    """`--rate`: N/PERIOD, the period in seconds or with a unit (10/1s, 100/m, 5/30s)."""
    if value is None:
        return KEEP
    if value.strip() == NONE:
        return None
    found = _RATE.fullmatch(value.strip())
    if found is None or (found.group(2) in ("", ".") and not found.group(3)):
        raise click.BadParameter(
            f"{value!r}: give N/PERIOD (10/1s, 100/m, 5/30s, 1000/1h), or 'none' for no limit"
        )
    count, number, unit = found.groups()
    period = (float(number) if number else 1.0) * UNIT_SECONDS[unit or "s"]
    return int(count), period


def _row(q: QueueInfo) -> str:
    most = "-" if q.concurrency is None else str(q.concurrency)
    rate = "-" if q.rate is None else f"{q.rate[0]}/{q.rate[1]:g}s"
    age = "-" if q.oldest_age is None else f"{q.oldest_age:.1f}s"
    runs = f"{q.runs_enqueued:>8} {q.runs_admitted:>8}"
    return f"{q.name:<24} {most:>11} {rate:>12} {q.depth:>7} {q.running:>7} {age:>10} {runs}"


def _echo(found: list[QueueInfo] | QueueInfo, as_json: bool, **_: str) -> None:
    """The queues (or the one queue) as JSON with --json, else as a table."""
    rows = [found] if isinstance(found, QueueInfo) else found
    if as_json:
        shown = [q.to_json() for q in rows]
        click.echo(dump(shown[0] if isinstance(found, QueueInfo) else shown))
        return
    head = ("QUEUE", "CONCURRENCY", "RATE", "DEPTH", "RUNNING", "OLDEST", "ENQUEUED", "ADMITTED")
    click.echo(
        f"{head[0]:<24} {head[1]:>11} {head[2]:>12} {head[3]:>7} {head[4]:>7} {head[5]:>10} "
        f"{head[6]:>8} {head[7]:>8}"
    )
    for q in rows:
        click.echo(_row(q))


@click.group()
def queues() -> None:
    """Named queues: the limits on an activity's attempts and on the runs started on a
    queue (concurrency, rate), and their load."""


answer_command(
    queues,
    "list",
    "List the tenant's queues: limits, depth (waiting), running, oldest waiting age.",
    Engine.queues,
    _echo,
    (tenant_option, json_option, db_option),
)
answer_command(
    queues,
    "show",
    "Show queue NAME of the tenant.",
    Engine.queue,
    _echo,
    (click.argument("name"), tenant_option, json_option, db_option),
)


@queues.command("set")
@click.argument("name")
@tenant_option
@click.option(
    "--concurrency",
    callback=_concurrency,
    help="At most N attempts at once, across every engine and host ('none': no limit).",
)
@click.option(
    "--rate",
    callback=_rate,
    help="At most N attempts started per period: N/PERIOD, e.g. 10/1s, 100/m ('none').",
)
@click.option(
    "--key-concurrency",
    callback=_concurrency,
    help="At most N attempts at once of the runs with one concurrency key ('none').",
)
@click.option(
    "--worker-concurrency",
    callback=_concurrency,
    help="At most N attempts of the queue held at once by one worker process ('none').",
)
@output_option("Print the queue as JSON afterwards.")
@db_option
def queues_set(name: str, tenant: str, as_json: bool, db: str, **limits: Any) -> None:
    """Set the limits of queue NAME; a limit not given stays as it is."""
    # The options but --tenant are named as `Engine.configure_queue`'s limits: `limits`.
    with open_engine(db) as engine:
        found = engine.configure_queue(name, tenant=tenant, **limits)
    _echo(found, as_json)
