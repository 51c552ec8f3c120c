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
from datetime import timedelta
from typing import Any

import click

from waypost.cli_common import db_option, dump, open_engine, tenant_option
from waypost.cli_definitions import definitions, runs_migrate
from waypost.errors import WaypostError


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


def _check_http_allow(
    ctx: click.Context, param: click.Parameter, hosts: tuple[str, ...]
) -> tuple[str, ...]:
    from waypost.engine.http import make_http_activity

    try:
        make_http_activity(allow=list(hosts))  # refuses a malformed entry
    except WaypostError as exc:
        raise click.BadParameter(str(exc), ctx=ctx, param=param) from exc
    return hosts


@main.command()
@db_option
@click.option(
    "--app",
    "apps",
    multiple=True,
    help="Module whose workflows and activities to serve (repeatable; without it the "
    "worker serves only published definitions).",
)
@click.option("--lease", type=float, default=30.0, show_default=True, help="Task lease in seconds.")
@click.option(
    "--grace", type=float, default=30.0, show_default=True, help="Shutdown grace in seconds."
)
@click.option("--max-activities", type=int, default=100, show_default=True)
@click.option(
    "--notify",
    default="log",
    show_default=True,
    help="Where approval notifications go: log, file:PATH, smtp://host:port?sender=..., "
    "webhook+https://host/path?secret=...",
)
@click.option(
    "--approval-url",
    default="http://localhost:8000/approvals",
    show_default=True,
    help="Base of the approve/reject links in notifications.",
)
@click.option(
    "--http-allow",
    "http_allow",
    multiple=True,
    metavar="HOST",
    callback=_check_http_allow,
    help="A host that `http` steps of tenant-defined workflows may call (repeatable): "
    "'api.example.com', '*.example.com' for its subdomains, 'host:port', or '*' for any. "
    "Only these hosts; without the option this worker runs no `http` step.",
)
def worker(
    db: str,
    apps: tuple[str, ...],
    lease: float,
    grace: float,
    max_activities: int,
    notify: str,
    approval_url: str,
    http_allow: tuple[str, ...],
) -> None:
    """Serve the workflows and activities of --app modules, and published definitions,
    until SIGTERM/SIGINT."""
    logging.basicConfig(
        level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    items = _load_apps(apps)
    options = {
        "lease": lease,
        "shutdown_grace": grace,
        "max_activities": max_activities,
        "notifier": _sender(notify),
        "approval_url": approval_url,
        "http_allow": list(http_allow) or None,
    }
    with open_engine(db, **options) as engine:
        engine.register(*items)
        calls = f"; http steps may call {', '.join(http_allow)}" if http_allow else ""
        click.echo(
            f"worker {engine.aio.owner} serving {len(items)} workflows/activities and published "
            f"definitions on {db}{calls}",
            err=True,
        )
        engine.run_forever(grace=timedelta(seconds=grace))


def _sender(spec: str) -> Any:
    from waypost.engine.senders import senders_from_url

    try:
        return senders_from_url(spec)
    except WaypostError as exc:
        raise click.BadParameter(str(exc), param_hint="--notify") from exc


def _load_apps(apps: tuple[str, ...]) -> list[Any]:
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
    return items


@main.command()
@click.argument("workflow")
@click.argument("payload", required=False)
@click.option(
    "--app",
    "apps",
    multiple=True,
    help="Module defining the workflow (not needed for a published definition).",
)
@click.option(
    "--version",
    "version",
    default=None,
    help="The version to start: a definition's version number (default: the newest).",
)
@click.option("--run-id", default=None, help="The run's id (starting it again is harmless).")
@click.option("--started-by", default=None, help="Who starts it (may not approve it).")
@db_option
@tenant_option
def start(
    workflow: str,
    payload: str | None,
    apps: tuple[str, ...],
    version: str | None,
    run_id: str | None,
    started_by: str | None,
    db: str,
    tenant: str,
) -> None:
    """Start a run of WORKFLOW with a JSON PAYLOAD; prints the run id (workers run it).

    WORKFLOW is a workflow of an --app module or, if none has that name, a
    definition the tenant published.
    """
    from waypost.model.definitions import InputError

    value = _json_arg(payload, "PAYLOAD")
    with open_engine(db) as engine:
        engine.register(*_load_apps(apps))
        try:
            handle = engine.start(
                workflow,
                value,
                run_id=run_id,
                tenant=tenant,
                version=version,
                started_by=started_by,
            )
        except InputError as exc:
            count = len(exc.problems)
            click.echo(
                f"the input does not satisfy definition {exc.name!r}: {count} problem(s); "
                "nothing started",
                err=True,
            )
            for problem in exc.problems:
                click.echo(f"  {problem.path or '(input)'}: {problem.message}", err=True)
            sys.exit(1)
        except WaypostError:
            raise
        except ValueError as exc:  # a malformed version, run id, tenant or principal
            raise click.UsageError(str(exc)) from exc
        click.echo(handle.run_id)


def _json_arg(text: str | None, name: str) -> Any:
    if text is None:
        return None
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise click.BadParameter(f"not JSON: {exc}", param_hint=name) from exc


@main.group()
def runs() -> None:
    """Inspect runs; move waiting definition runs to another version."""


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
    with open_engine(db) as engine:
        try:
            infos = engine.list_runs(tenant=tenant, status=status, workflow=workflow, limit=limit)
        except ValueError as exc:
            raise click.ClickException(str(exc)) from exc
    if as_json:
        click.echo(dump([_info_json(i) for i in infos]))
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
    with open_engine(db) as engine:
        info = engine.get(run_id, tenant=tenant)
    click.echo(dump(_info_json(info)))


@runs.command("history")
@click.argument("run_id")
@db_option
@tenant_option
def runs_history(run_id: str, db: str, tenant: str) -> None:
    """Print a run's history, one JSON event per line."""
    with open_engine(db) as engine:
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
    with open_engine(db) as engine:
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
    with open_engine(db) as engine:
        engine.signal(run_id, name, value, tenant=tenant)
    click.echo(f"signal {name!r} sent to {run_id}")


@main.command()
@click.argument("run_id")
@click.option("--reason", required=True, help="Why the run is cancelled (recorded in its history).")
@db_option
@tenant_option
def cancel(run_id: str, reason: str, db: str, tenant: str) -> None:
    """Ask a run to stop; it ends `cancelled`."""
    with open_engine(db) as engine:
        engine.cancel(run_id, reason, tenant=tenant)
    click.echo(f"cancellation of {run_id} requested")


@main.group("db")
def db_group() -> None:
    """Database maintenance."""


@db_group.command("migrate")
@db_option
def db_migrate(db: str) -> None:
    """Create the schema or bring it up to date."""
    with open_engine(db) as engine:
        click.echo(f"schema of {engine.url} is up to date")


# == approvals =======================================================================
@main.group()
def approvals() -> None:
    """Human approvals: list them, decide them."""


def _approval_json(info: Any) -> dict[str, Any]:
    return {
        "approval_id": info.approval_id,
        "tenant": info.tenant,
        "run_id": info.run_id,
        "step": info.step,
        "name": info.name,
        "status": info.status,
        "policy": info.policy,
        "started_by": info.started_by,
        "data": info.data,
        "expires_at": info.expires_at.isoformat() if info.expires_at else None,
        "created_at": info.created_at.isoformat(),
        "votes": info.votes,
    }


@approvals.command("list")
@click.option("--as", "principal", default=None, help="Only those this user may decide now.")
@click.option(
    "--status", default="pending", show_default=True, help="pending, approved, ... or all"
)
@click.option("--run", "run_id", default=None, help="Only this run's.")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@db_option
@tenant_option
def approvals_list(
    principal: str | None, status: str, run_id: str | None, as_json: bool, db: str, tenant: str
) -> None:
    """List approvals."""
    with open_engine(db) as engine:
        found = engine.approvals(
            principal, None if status == "all" else status, tenant=tenant, run_id=run_id
        )
    if as_json:
        click.echo(dump([_approval_json(a) for a in found]))
        return
    for a in found:
        votes = ", ".join(f"{v['principal']}:{v['decision']}" for v in a.votes) or "-"
        expires = a.expires_at.isoformat(timespec="seconds") if a.expires_at else "never"
        click.echo(
            f"{a.approval_id}  {a.status:<9} {a.name:<16} run {a.run_id}  "
            f"expires {expires}  votes {votes}"
        )
    if not found:
        click.echo("no approvals", err=True)


@approvals.command("show")
@click.argument("approval_id")
@db_option
@tenant_option
def approvals_show(approval_id: str, db: str, tenant: str) -> None:
    """Show one approval as JSON."""
    with open_engine(db) as engine:
        try:
            info = engine.approval(approval_id, tenant=tenant)
        except LookupError as exc:
            raise click.ClickException(str(exc)) from exc
    click.echo(dump(_approval_json(info)))


def _decide(
    db: str, tenant: str, approval_id: str, token: str, principal: str, decision: str, comment: str
) -> None:
    from waypost.engine.approvals import DecisionRefused, InvalidCredential

    with open_engine(db) as engine:
        try:
            receipt = engine.decide(
                approval_id, token, principal, decision, comment, tenant=tenant, auth="cli"
            )
        except (InvalidCredential, DecisionRefused) as exc:
            click.echo(f"refused: {exc}", err=True)
            sys.exit(1)
    if receipt.outcome == "pending":
        click.echo(f"{decision} by {principal} counted; the approval waits for more decisions")
    else:
        click.echo(f"{decision} by {principal} counted; the approval is {receipt.outcome}")


@main.command()
@click.argument("approval_id")
@click.option("--token", required=True, help="The credential from the notification.")
@click.option("--as", "principal", required=True, help="Who you are (the approver).")
@click.option("--comment", default="", help="Recorded with the decision.")
@db_option
@tenant_option
def approve(
    approval_id: str, token: str, principal: str, comment: str, db: str, tenant: str
) -> None:
    """Approve APPROVAL_ID with your credential."""
    _decide(db, tenant, approval_id, token, principal, "approve", comment)


@main.command()
@click.argument("approval_id")
@click.option("--token", required=True, help="The credential from the notification.")
@click.option("--as", "principal", required=True, help="Who you are (the approver).")
@click.option("--comment", required=True, help="Why (recorded with the decision).")
@db_option
@tenant_option
def reject(
    approval_id: str, token: str, principal: str, comment: str, db: str, tenant: str
) -> None:
    """Reject APPROVAL_ID with your credential."""
    _decide(db, tenant, approval_id, token, principal, "reject", comment)


# == the built-in directory ==========================================================
@main.group()
def groups() -> None:
    """Groups of approvers in the built-in directory."""


@groups.command("add")
@click.argument("group")
@click.argument("users", nargs=-1, required=True)
@db_option
@tenant_option
def groups_add(group: str, users: tuple[str, ...], db: str, tenant: str) -> None:
    """Add USERS to GROUP."""
    with open_engine(db) as engine:
        added = engine.add_to_group(group, list(users), tenant=tenant)
    click.echo(f"{added} added to {group} (tenant {tenant})")


@groups.command("remove")
@click.argument("group")
@click.argument("users", nargs=-1, required=True)
@db_option
@tenant_option
def groups_remove(group: str, users: tuple[str, ...], db: str, tenant: str) -> None:
    """Remove USERS from GROUP (their pending credentials stop working for it)."""
    with open_engine(db) as engine:
        removed = engine.remove_from_group(group, list(users), tenant=tenant)
    click.echo(f"{removed} removed from {group} (tenant {tenant})")


@groups.command("list")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@db_option
@tenant_option
def groups_list(as_json: bool, db: str, tenant: str) -> None:
    """List groups and their members."""
    with open_engine(db) as engine:
        found = engine.groups(tenant=tenant)
    if as_json:
        click.echo(dump(found))
        return
    for group, members in found.items():
        click.echo(f"{group}: {', '.join(members)}")
    if not found:
        click.echo("no groups", err=True)


main.add_command(definitions)
runs.add_command(runs_migrate)

if __name__ == "__main__":  # pragma: no cover
    main()
