"""The `waypost` command.

A thin layer: parse arguments, call the engine, print. The database comes
from `--db` or the WAYPOST_DB environment variable (default
`sqlite:///waypost.db`).
"""

from __future__ import annotations

import importlib
import json
import logging
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import timedelta
from typing import Any

import click

from waypost.engine.sync import Engine
from waypost.errors import WaypostError
from waypost.store import DEFAULT_URL

db_option = click.option(
    "--db",
    "db",
    envvar="WAYPOST_DB",
    default=DEFAULT_URL,
    show_default=True,
    help="Database URL (or set WAYPOST_DB).",
)
tenant_option = click.option(
    "--tenant", default="default", show_default=True, help="Tenant of the run."
)


@contextmanager
def _engine(db: str, **options: Any) -> Iterator[Engine]:
    try:
        engine = Engine(db, **options)
    except WaypostError as exc:
        raise click.ClickException(str(exc)) from exc
    try:
        yield engine
    except WaypostError as exc:
        raise click.ClickException(str(exc)) from exc
    finally:
        engine.close()


def _dump(value: Any) -> str:
    return json.dumps(value, indent=2, sort_keys=True, default=str)


@click.group()
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
    from waypost.demo import run_demo

    try:
        code = run_demo(db, say=click.echo)
    except WaypostError as exc:
        raise click.ClickException(str(exc)) from exc
    sys.exit(code)


@main.command()
@db_option
@click.option(
    "--app",
    "apps",
    multiple=True,
    required=True,
    help="Module whose workflows and activities to serve.",
)
@click.option("--lease", type=float, default=30.0, show_default=True, help="Task lease in seconds.")
@click.option(
    "--grace", type=float, default=30.0, show_default=True, help="Shutdown grace in seconds."
)
@click.option("--max-activities", type=int, default=100, show_default=True)
def worker(db: str, apps: tuple[str, ...], lease: float, grace: float, max_activities: int) -> None:
    """Serve the workflows and activities of --app modules until SIGTERM/SIGINT."""
    logging.basicConfig(
        level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    items = []
    for name in apps:
        try:
            module = importlib.import_module(name)
        except ImportError as exc:
            raise click.ClickException(f"cannot import --app {name!r}: {exc}") from exc
        found = [
            obj
            for obj in vars(module).values()
            if hasattr(obj, "__waypost_workflow__") or hasattr(obj, "__waypost_activity__")
        ]
        if not found:
            raise click.ClickException(f"module {name!r} defines no @workflow or @activity")
        items.extend(found)
    options = {
        "lease": lease,
        "shutdown_grace": grace,
        "max_activities": max_activities,
    }
    with _engine(db, **options) as engine:
        engine.register(*items)
        click.echo(
            f"worker {engine.aio.owner} serving {len(items)} workflows/activities on {db}", err=True
        )
        engine.run_forever(grace=timedelta(seconds=grace))


@main.group()
def runs() -> None:
    """Inspect runs."""


@runs.command("list")
@db_option
@click.option("--tenant", default=None, help="Only this tenant (default: all).")
@click.option("--status", default=None, help="Only runs with this status.")
@click.option("--workflow", default=None, help="Only runs of this workflow.")
@click.option("--limit", type=int, default=50, show_default=True)
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
def runs_list(
    db: str, tenant: str | None, status: str | None, workflow: str | None, limit: int, as_json: bool
) -> None:
    """List runs, newest first."""
    with _engine(db) as engine:
        try:
            infos = engine.list_runs(tenant=tenant, status=status, workflow=workflow, limit=limit)
        except ValueError as exc:
            raise click.ClickException(str(exc)) from exc
    if as_json:
        click.echo(_dump([_info_json(i) for i in infos]))
        return
    for i in infos:
        created = f"{i.created_at:%Y-%m-%d %H:%M:%S}"
        name = f"{i.workflow}@{i.version}"
        click.echo(f"{i.tenant:<10} {i.run_id:<32} {name:<20} {i.status.value:<10} {created}")


def _info_json(info: Any) -> dict[str, Any]:
    return {
        "tenant": info.tenant,
        "run_id": info.run_id,
        "workflow": info.workflow,
        "version": info.version,
        "status": info.status.value,
        "result": info.result,
        "error": info.error,
        "waiting_for": info.waiting_for,
        "events": info.last_seq,
        "created_at": info.created_at.isoformat(),
        "updated_at": info.updated_at.isoformat(),
        "finished_at": info.finished_at.isoformat() if info.finished_at else None,
    }


@runs.command("show")
@click.argument("run_id")
@db_option
@tenant_option
def runs_show(run_id: str, db: str, tenant: str) -> None:
    """Show one run's status, result or error, and what it waits for."""
    with _engine(db) as engine:
        info = engine.get(run_id, tenant=tenant)
    click.echo(_dump(_info_json(info)))


@runs.command("history")
@click.argument("run_id")
@db_option
@tenant_option
def runs_history(run_id: str, db: str, tenant: str) -> None:
    """Print a run's history, one JSON event per line."""
    with _engine(db) as engine:
        events = engine.history(run_id, tenant=tenant)
    for ev in events:
        click.echo(
            json.dumps(
                {"seq": ev.seq, "type": ev.type, "time": ev.time.isoformat(), "data": ev.data},
                sort_keys=True,
            )
        )


@runs.command("verify")
@click.argument("run_id")
@db_option
@tenant_option
def runs_verify(run_id: str, db: str, tenant: str) -> None:
    """Check a run's hash chain; exit 1 if any event was changed, removed or reordered."""
    with _engine(db) as engine:
        problems = engine.verify(run_id, tenant=tenant)
    if problems:
        for p in problems:
            click.echo(f"event {p.seq}: {p.problem}", err=True)
        sys.exit(1)
    click.echo(f"{run_id}: history intact")


@main.command()
@click.argument("run_id")
@click.argument("name")
@click.argument("payload", required=False)
@db_option
@tenant_option
def signal(run_id: str, name: str, payload: str | None, db: str, tenant: str) -> None:
    """Send signal NAME to a run, with an optional JSON PAYLOAD."""
    try:
        value = json.loads(payload) if payload is not None else None
    except json.JSONDecodeError as exc:
        raise click.BadParameter(f"not JSON: {exc}", param_hint="PAYLOAD") from exc
    with _engine(db) as engine:
        engine.signal(run_id, name, value, tenant=tenant)
    click.echo(f"signal {name!r} sent to {run_id}")


@main.command()
@click.argument("run_id")
@click.option("--reason", required=True, help="Why the run is cancelled (recorded in its history).")
@db_option
@tenant_option
def cancel(run_id: str, reason: str, db: str, tenant: str) -> None:
    """Ask a run to stop; it ends `cancelled`."""
    with _engine(db) as engine:
        engine.cancel(run_id, reason, tenant=tenant)
    click.echo(f"cancellation of {run_id} requested")


@main.group("db")
def db_group() -> None:
    """Database maintenance."""


@db_group.command("migrate")
@db_option
def db_migrate(db: str) -> None:
    """Create the schema or bring it up to date."""
    with _engine(db) as engine:
        click.echo(f"schema of {engine.url} is up to date")


if __name__ == "__main__":  # pragma: no cover
    main()
