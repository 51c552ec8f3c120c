"""The `waypost` command: its root group, `demo`, `worker`, `db migrate`, and the assembly
that adds every domain's commands (`runs.py`, `approvals.py`, `access.py`, ...) to it.

A thin layer: parse arguments, call the engine, print. The database comes
from `--db` or the WAYPOST_DB environment variable (default
`sqlite:///waypost.db`).
"""

from __future__ import annotations

import logging
import sys

import click

from waypost.engine import tracing
from waypost.errors import WaypostError
from waypost.model.logs import configure_logging
from waypost.store import redact_url

from .access import keys, tenants
from .approvals import approvals, approve, groups, reject
from .common import (
    Cli,
    Serving,
    app_option,
    db_option,
    load_apps,
    log_format_option,
    open_engine,
    sender_from_spec,
    worker_options,
)
from .definitions import definitions, runs_migrate
from .derived import add_derived_commands
from .encryption import runs_reencrypt
from .fork import runs_fork
from .metrics import exporting, metrics_observer
from .queues import queues
from .replay import replay
from .retention import runs_purge, runs_purged
from .runs import cancel, runs, signal, start
from .schedules import schedules
from .sealing import runs_seal_legacy
from .server import server
from .stopping import (
    INTERRUPTED,
    Interrupted,
    activities,
    interrupts,
    say_on_stderr,
    stopping_line,
)
from .updates import runs_query, runs_update
from .users import users
from .webhooks import webhooks


@click.group(cls=Cli)
@click.version_option(package_name="waypost")
def main() -> None:
    """waypost: durable workflows for Python."""


@main.command()
@click.option(
    "--db",
    "db",
    default="sqlite:///waypost-demo.db",
    show_default=True,
    help="Database URL for the demo runs.",
)
def demo(db: str) -> None:
    """Start an engine on a SQLite file and run the example order workflows."""
    from .demo import run_demo

    try:
        with interrupts(raising=True, say=stopping_line("the activities")):
            code = run_demo(db, say=click.echo)
    except Interrupted:
        code = INTERRUPTED  # stopped gracefully, but the demo did not finish
    except WaypostError as exc:
        raise click.ClickException(str(exc)) from exc
    sys.exit(code)


@main.command()
@db_option
@app_option(
    "Module whose workflows and activities to serve (repeatable; without it the "
    "worker serves only published definitions)."
)
@worker_options
@log_format_option
@click.option(
    "--max-lapses",
    type=click.IntRange(min=1),
    default=5,
    show_default=True,
    help="Suspend a run whose workflow task or activity step lost its engine this many "
    "times (a poison run).",
)
@click.option(
    "--metrics-port",
    type=click.IntRange(0, 65535),
    default=None,
    help="Serve Prometheus metrics on this port (any path; no API key: bind it where only "
    "Prometheus reaches it).",
)
@click.option(
    "--metrics-host",
    default="127.0.0.1",
    show_default=True,
    help="Address the metrics port listens on.",
)
@click.option(
    "--queues",
    "serve_queues",
    default=None,
    metavar="A,B",
    help="Take activity attempts only of these named queues (comma-separated; the "
    "default queue is 'default'); without it, of every queue.",
)
def worker(
    db: str,
    apps: tuple[str, ...],
    serve_queues: str | None,
    log_format: str,
    max_lapses: int,
    metrics_port: int | None,
    metrics_host: str,
    serving: Serving,
) -> None:
    """Serve the workflows and activities of --app modules, and published definitions,
    until SIGTERM/SIGINT.

    Logs one line per workflow task claimed and finished and per activity attempt
    claimed, finished or retried (run id, step, attempt) on stderr. With
    OTEL_EXPORTER_OTLP_ENDPOINT set (and the otel extra and an OTLP exporter installed),
    sends the runs' traces there.
    """
    configure_logging(log_format, tracing.log_ids)
    tracing.configure_from_environment()
    items = load_apps(apps)
    options = {
        **serving.engine_options(),
        "notifier": sender_from_spec(serving.notify),
        **({"approval_url": serving.approval_url} if serving.approval_url else {}),
        "max_lapses": max_lapses,
    }
    metrics = None
    if metrics_port is not None:
        metrics = metrics_observer()
        options["observer"] = metrics
    with (
        interrupts() as stop,
        open_engine(db, **options) as engine,
        exporting(metrics, engine, metrics_host, metrics_port),
    ):
        engine.register(*items)
        if serve_queues is not None:
            engine.serve_queues(*(q.strip() for q in serve_queues.split(",")))
        allow = serving.http_allow
        calls = f"; http steps may call {', '.join(allow)}" if allow else ""
        only = f"; activities of queues {serve_queues} only" if serve_queues is not None else ""
        logging.getLogger("waypost.worker").info(
            "worker %s serving %d workflows/activities and published definitions on %s%s%s",
            engine.aio.owner,
            len(items),
            redact_url(db),
            calls,
            only,
        )
        with engine.running():  # leaving it stops gracefully, within --grace
            stop.wait()
            if stop.interrupted:
                in_flight = activities(engine.stats()["running_activities"])
                say_on_stderr(stopping_line(in_flight), log_format, "waypost.worker")


@main.group("db")
def db_group() -> None:
    """Database maintenance."""


@db_group.command("migrate")
@db_option
def db_migrate(db: str) -> None:
    """Create the schema or bring it up to date."""
    with open_engine(db) as engine:
        click.echo(f"schema of {redact_url(engine.url)} is up to date")


# == the assembly: every group and command under `waypost` ==========================
main.add_command(start)
main.add_command(signal)
main.add_command(cancel)
main.add_command(approve)
main.add_command(reject)
main.add_command(runs)
main.add_command(approvals)
main.add_command(groups)
main.add_command(definitions)
main.add_command(server)
main.add_command(tenants)
main.add_command(keys)
main.add_command(users)
main.add_command(webhooks)
main.add_command(queues)
main.add_command(schedules)
main.add_command(replay)
runs.add_command(start, "start")  # `waypost runs start` is `waypost start`
runs.add_command(runs_fork)
runs.add_command(runs_query)
runs.add_command(runs_update)
runs.add_command(runs_migrate)
runs.add_command(runs_purge)
runs.add_command(runs_purged)
runs.add_command(runs_reencrypt)
runs.add_command(runs_seal_legacy)
add_derived_commands(main)  # runs terminate, pause, resume, retry, skip, update-input
