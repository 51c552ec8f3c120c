"""The `waypost` command.

A thin layer: parse arguments, call the engine, print. The database comes
from `--db` or the WAYPOST_DB environment variable (default
`sqlite:///waypost.db`).
"""

from __future__ import annotations

import json
import logging
import sys
from datetime import timedelta
from typing import Any

import click

from waypost.engine import tracing
from waypost.errors import DecisionRefused, InvalidCredential, InvalidRequest, WaypostError
from waypost.model.logs import configure_logging
from waypost.model.operations_runs import MAX_HISTORY_PAGE
from waypost.runtime.registry import items_in_modules
from waypost.store import redact_url

from .access import keys, tenants
from .common import (
    Cli,
    check_cancel_grace,
    db_option,
    dump,
    log_format_option,
    open_engine,
    sender_from_spec,
    tenant_option,
    worker_options,
)
from .definitions import definitions, runs_migrate
from .derived import add_derived_commands
from .encryption import runs_reencrypt
from .fork import runs_fork
from .metrics import exporting, metrics_observer
from .output import cell, facts_grid, run_words, runs_table, show
from .queues import queues
from .replay import replay
from .retention import runs_purge, runs_purged
from .schedules import schedules
from .sealing import runs_seal_legacy
from .server import server
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
    help="Module whose workflows and activities to serve (repeatable; without it the "
    "worker serves only published definitions).",
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
    lease: float,
    grace: float,
    cancel_grace: float | None,
    max_activities: int,
    notify: str,
    approval_url: str | None,
    http_allow: tuple[str, ...],
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
    items = _load_apps(apps)
    options = {
        "lease": lease,
        "shutdown_grace": grace,
        "cancel_grace": cancel_grace,
        "max_activities": max_activities,
        "notifier": sender_from_spec(notify),
        **({"approval_url": approval_url} if approval_url else {}),
        "http_allow": list(http_allow) or None,
        "max_lapses": max_lapses,
    }
    metrics = None
    if metrics_port is not None:
        metrics = metrics_observer()
        options["observer"] = metrics
    with (
        open_engine(db, **options) as engine,
        exporting(metrics, engine, metrics_host, metrics_port),
    ):
        engine.register(*items)
        if serve_queues is not None:
            engine.serve_queues(*(q.strip() for q in serve_queues.split(",")))
        calls = f"; http steps may call {', '.join(http_allow)}" if http_allow else ""
        only = f"; activities of queues {serve_queues} only" if serve_queues is not None else ""
        logging.getLogger("waypost.worker").info(
            "worker %s serving %d workflows/activities and published definitions on %s%s%s",
            engine.aio.owner,
            len(items),
            redact_url(db),
            calls,
            only,
        )
        engine.run_forever(grace=timedelta(seconds=grace))


def _load_apps(apps: tuple[str, ...]) -> list[Any]:
    try:
        return items_in_modules(apps)
    except WaypostError as exc:
        raise click.ClickException(str(exc).replace("app module", "--app")) from exc


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
                concurrency_key=concurrency_key,
                dedup_id=dedup_id,
                queue=queue,
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
        except InvalidRequest as exc:  # a malformed version, run id, tenant or principal
            raise click.UsageError(str(exc)) from exc
        click.echo(handle.run_id)


def _json_arg(text: str | None, name: str) -> Any:
    if text is None:
        return None
    try:
        return json.loads(text)
    except RecursionError:
        raise click.BadParameter("not JSON: nested too deeply", param_hint=name) from None
    except ValueError as exc:  # not JSON, or a number Python will not read
        raise click.BadParameter(f"not JSON: {exc}", param_hint=name) from None


@main.group()
def runs() -> None:
    """Start and inspect runs; move waiting definition runs to another version."""


runs.add_command(start, "start")  # `waypost runs start` is `waypost start`


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
        "next_action": info.next_action,
        "parent": info.parent,
        "children": info.children,
    }


@runs.command("show")
@click.argument("run_id")
@db_option
@tenant_option
@click.option("--json", "as_json", is_flag=True, help="Print the run's snapshot as JSON.")
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
def runs_history(run_id: str, after: int, limit: int | None, db: str, tenant: str) -> None:
    """Print a run's history, one JSON event per line: read a page at a time, so a long
    history is never held whole."""
    left = limit
    with open_engine(db, must_exist=True) as engine:
        next_after: int | None = after
        while next_after is not None and (left is None or left > 0):
            size = MAX_HISTORY_PAGE if left is None else min(left, MAX_HISTORY_PAGE)
            page = engine.history_page(run_id, after_seq=next_after, limit=size, tenant=tenant)
            for ev in page.events:
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


@main.command()
@click.argument("run_id")
@click.argument("name")
@click.argument("payload", required=False)
@db_option
@tenant_option
def signal(run_id: str, name: str, payload: str | None, db: str, tenant: str) -> None:
    """Send signal NAME to a run, with an optional JSON PAYLOAD."""
    value = _json_arg(payload, "PAYLOAD")
    with open_engine(db, must_exist=True) as engine:
        engine.signal(run_id, name, value, tenant=tenant)
    click.echo(f"signal {name!r} sent to {run_id}")


@main.command()
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


runs.add_command(runs_fork)
runs.add_command(runs_query)
runs.add_command(runs_update)


@main.group("db")
def db_group() -> None:
    """Database maintenance."""


@db_group.command("migrate")
@db_option
def db_migrate(db: str) -> None:
    """Create the schema or bring it up to date."""
    with open_engine(db) as engine:
        click.echo(f"schema of {redact_url(engine.url)} is up to date")


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
        "refusals": info.refusals,
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
    with open_engine(db, must_exist=True) as engine:
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
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@db_option
@tenant_option
def approvals_show(approval_id: str, as_json: bool, db: str, tenant: str) -> None:
    """Show one approval: its status, policy, votes and refusals."""
    with open_engine(db, must_exist=True) as engine:
        try:
            info = engine.approval(approval_id, tenant=tenant)
        except LookupError as exc:
            raise click.ClickException(str(exc)) from exc
    shown = _approval_json(info)
    if as_json:
        click.echo(dump(shown))
        return
    facts = facts_grid()
    for name in ("approval_id", "tenant", "run_id", "step", "name", "status", "started_by"):
        facts.add_row(name, cell(shown[name]))
    facts.add_row("policy", cell(json.dumps(shown["policy"], sort_keys=True), 400))
    facts.add_row("expires_at", shown["expires_at"] or "never")
    facts.add_row("created_at", shown["created_at"])
    votes = ", ".join(f"{v.get('principal')}:{v.get('decision')}" for v in info.votes)
    facts.add_row("votes", cell(votes or "-", 400))
    facts.add_row("refusals", str(sum(int(r.get("count", 1)) for r in info.refusals)))
    show(facts)


def _decide(
    db: str, tenant: str, approval_id: str, token: str, principal: str, decision: str, comment: str
) -> None:
    # The caller gets the API's answer and nothing else: the audit log says why a
    # credential was refused, which is for the operator's log, not for whoever typed
    # the command (without a handler, Python would print warnings to stderr).
    logging.getLogger("waypost").addHandler(logging.NullHandler())
    with open_engine(db, must_exist=True) as engine:
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
    """Add USERS to GROUP (they are asked on its pending approvals)."""
    with open_engine(db) as engine:
        added = engine.add_to_group(group, list(users), tenant=tenant)
    click.echo(f"{added} added to {group} (tenant {tenant})")


@groups.command("remove")
@click.argument("group")
@click.argument("users", nargs=-1, required=True)
@db_option
@tenant_option
def groups_remove(group: str, users: tuple[str, ...], db: str, tenant: str) -> None:
    """Remove USERS from GROUP (their credentials on its pending approvals stop working)."""
    with open_engine(db, must_exist=True) as engine:
        removed = engine.remove_from_group(group, list(users), tenant=tenant)
    click.echo(f"{removed} removed from {group} (tenant {tenant})")


@groups.command("list")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@db_option
@tenant_option
def groups_list(as_json: bool, db: str, tenant: str) -> None:
    """List groups and their members."""
    with open_engine(db, must_exist=True) as engine:
        found = engine.groups(tenant=tenant)
    if as_json:
        click.echo(dump(found))
        return
    for group, members in found.items():
        click.echo(f"{group}: {', '.join(members)}")
    if not found:
        click.echo("no groups", err=True)


main.add_command(definitions)
main.add_command(server)
main.add_command(tenants)
main.add_command(keys)
main.add_command(users)
main.add_command(webhooks)
main.add_command(queues)
main.add_command(schedules)
main.add_command(replay)
runs.add_command(runs_migrate)
runs.add_command(runs_purge)
runs.add_command(runs_purged)
runs.add_command(runs_reencrypt)
runs.add_command(runs_seal_legacy)
add_derived_commands(main)  # runs terminate, pause, resume, retry, skip, update-input
