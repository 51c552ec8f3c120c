"""The `waypost tenants` and `waypost keys` commands: tenants and their API keys.

The command line acts as the platform operator: it may create, disable, enable and
delete tenants, and make, list and revoke the keys of any tenant it names. A new key is
printed alone on stdout (so `KEY=$(waypost keys create ...)` takes it) and never again.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta
from typing import Any

import click

from waypost.client.sync import Engine
from waypost.model.quotas import DEFAULT, UNLIMITED
from waypost.model.records import KeyInfo, TenantInfo

from .common import (
    answer_command,
    db_option,
    dump,
    duration_seconds,
    echo_found,
    json_option,
    list_command,
    open_engine,
    output_option,
    record_commands,
    record_json,
    role_names,
    roles_option,
)

key_tenant_option = click.option("--tenant", required=True, help="The tenant of the keys.")


def parse_expiry(text: str, now: datetime) -> datetime:
    """`--expires`: a duration from now (`90m`, `12h`, `30d`, `2w`) or an ISO-8601 time
    with a time zone (`2030-01-31T12:00:00Z`)."""
    seconds = duration_seconds(text, 6)
    if seconds is not None:
        try:
            return now + timedelta(seconds=seconds)
        except OverflowError:
            raise click.BadParameter(
                f"{text.strip()} from now is past the year 9999; give a shorter duration",
                param_hint="--expires",
            ) from None
    try:
        when = datetime.fromisoformat(text.strip())
    except ValueError:
        raise click.BadParameter(
            "give a duration (90m, 12h, 30d, 2w) or an ISO-8601 time with a time zone "
            "(2030-01-31T12:00:00Z)",
            param_hint="--expires",
        ) from None
    if when.utcoffset() is None:
        raise click.BadParameter(
            "the time needs a time zone (Z or +02:00, say)", param_hint="--expires"
        )
    return when


def _status(key: KeyInfo, now: datetime) -> str:
    if key.revoked_at is not None:
        return "revoked"
    if key.expires_at is not None and key.expires_at <= now:
        return "expired"
    return "active"


def _key_json(key: KeyInfo, now: datetime) -> dict[str, Any]:
    return record_json(
        key,
        "key_id",
        "tenant",
        "principal",
        "created_at",
        "created_by",
        "expires_at",
        "revoked_at",
        "revoked_by",
        "last_used_at",
        roles=[r.value for r in key.roles],
        status=_status(key, now),
    )


KEY_COLUMNS = ("KEY ID", "STATUS", "PRINCIPAL", "ROLES", "EXPIRES")


def _key_row(key: KeyInfo, now: datetime) -> tuple[str, ...]:
    expires = key.expires_at.isoformat(timespec="seconds") if key.expires_at else "never"
    roles = ",".join(r.value for r in key.roles)
    return (key.key_id, _status(key, now), key.principal, roles, expires)


def _tenant_json(tenant: TenantInfo) -> dict[str, Any]:
    return record_json(
        tenant, "tenant", "created_at", "created_by", "quotas", "disabled_at", "disabled_by"
    )


TENANT_COLUMNS = ("TENANT", "CREATED", "CREATED BY", "STATUS")


def _tenant_row(t: TenantInfo) -> tuple[str, ...]:
    created = t.created_at.isoformat(timespec="seconds") if t.created_at else "never"
    status = (
        f"DISABLED {t.disabled_at.isoformat(timespec='seconds')} by {t.disabled_by}"
        if t.disabled_at
        else "active"
    )
    return (t.tenant, created, t.created_by or "-", status)


def _quotas(ctx: click.Context, param: click.Parameter, values: tuple[str, ...]) -> dict[str, int]:
    quotas: dict[str, int] = {}
    for value in values:
        name, equals, number = value.partition("=")
        if not equals or re.fullmatch(r"[0-9]{1,15}", number.strip()) is None:
            raise click.BadParameter(f"{value!r}: give NAME=N, a whole number", ctx, param)
        quotas[name.strip()] = int(number)
    return quotas


# == tenants ===========================================================================
@click.group()
def tenants() -> None:
    """Tenants: API keys are made for tenants that exist."""


@tenants.command("create")
@click.argument("tenant")
@click.option(
    "--quota",
    "quotas",
    multiple=True,
    metavar="NAME=N",
    callback=_quotas,
    help="A quota stored with the tenant (repeatable).",
)
@db_option
def tenants_create(tenant: str, quotas: dict[str, int], db: str) -> None:
    """Create TENANT."""
    with open_engine(db) as engine:
        engine.create_tenant(tenant, quotas=quotas or None)
    click.echo(f"tenant {tenant} created")


list_command(
    tenants,
    "List tenants.",
    Engine.list_tenants,
    TENANT_COLUMNS,
    _tenant_row,
    to_json=_tenant_json,
    none="no tenants",
    options=(json_option, db_option),
)
answer_command(
    tenants,
    "show",
    "Show TENANT's quotas (the engine's defaults with its overrides) and what it holds.",
    Engine.get_tenant,
    lambda info, as_json, tenant: _show(info, as_json),
    (click.argument("tenant"), json_option, db_option),
)


@tenants.command("disable")
@click.argument("tenant")
@click.option("--reason", default="", help="Why (in the log).")
@db_option
def tenants_disable(tenant: str, reason: str, db: str) -> None:
    """Disable TENANT: its API keys and console sessions are refused at once, and none of
    its runs' work is claimed until it is enabled (running attempts finish)."""
    with open_engine(db, must_exist=True) as engine:
        info = engine.disable_tenant(tenant, reason=reason)
    since = info.disabled_at.isoformat(timespec="seconds") if info.disabled_at else "now"
    click.echo(f"tenant {tenant} disabled (since {since})")


@tenants.command("enable")
@click.argument("tenant")
@db_option
def tenants_enable(tenant: str, db: str) -> None:
    """Enable a disabled TENANT again: its keys and sessions work, its runs go on."""
    with open_engine(db, must_exist=True) as engine:
        engine.enable_tenant(tenant)
    click.echo(f"tenant {tenant} enabled")


@tenants.command("delete")
@click.argument("tenant")
@click.option(
    "--batch",
    type=click.IntRange(1, 10_000),
    default=1000,
    show_default=True,
    help="Rows deleted per transaction.",
)
@click.option("--yes", is_flag=True, help="Do not ask for confirmation.")
@db_option
def tenants_delete(tenant: str, batch: int, yes: bool, db: str) -> None:
    """Delete every row of a disabled TENANT (runs, histories, tasks, timers, approvals,
    definitions, schedules, queues, webhook sources, users, sessions, keys), a batch per
    transaction with its progress on stderr; its own row goes last. It must be disabled
    first (`waypost tenants disable`). Another tenant's rows are never touched."""
    if not yes:
        click.confirm(f"Delete tenant {tenant} and everything it holds, for good?", abort=True)
    total = 0
    with open_engine(db, must_exist=True) as engine:
        while True:
            done = engine.delete_tenant(tenant, batch=batch)
            total += done.rows
            tables = ", ".join(f"{table} {n}" for table, n in done.deleted.items())
            click.echo(f"deleted {done.rows} rows ({tables or 'none'}); {total} so far", err=True)
            if done.done:
                break
    click.echo(f"tenant {tenant} deleted ({total} rows)")


def _set_quotas(
    ctx: click.Context, param: click.Parameter, values: tuple[str, ...]
) -> dict[str, Any]:
    changes: dict[str, Any] = {}
    for value in values:
        name, equals, number = value.partition("=")
        number = number.strip()
        if not equals or not name.strip():
            raise click.BadParameter(f"{value!r}: give NAME=N, NAME=unlimited or NAME=default")
        if number in (UNLIMITED, DEFAULT):
            changes[name.strip()] = number
        elif re.fullmatch(r"[0-9]{1,15}", number):
            changes[name.strip()] = int(number)
        elif re.fullmatch(r"[0-9]{1,15}\.[0-9]{1,6}", number):
            changes[name.strip()] = float(number)
        else:
            raise click.BadParameter(
                f"{value!r}: give NAME=N (a number), NAME=unlimited or NAME=default"
            )
    return changes


@tenants.command("set-quota")
@click.argument("tenant")
@click.argument("quotas", nargs=-1, required=True, metavar="NAME=N...", callback=_set_quotas)
@output_option("Print the tenant as JSON afterwards.")
@db_option
def tenants_set_quota(tenant: str, quotas: dict[str, Any], as_json: bool, db: str) -> None:
    """Override quotas of TENANT: NAME=N, NAME=unlimited, or NAME=default (the engine's).

    Names: max_concurrent_runs, starts_per_second, start_burst, max_concurrent_activities,
    max_events_per_run, max_pending_timers, max_payload_bytes, max_definitions,
    retention_days, max_run_bytes, max_live_run_bytes, max_schedules, max_webhook_sources,
    max_queues, max_users, max_api_keys, min_schedule_interval.
    """
    with open_engine(db, must_exist=True) as engine:
        info = engine.set_quotas(tenant, quotas)
    _show(info, as_json)


def _show(info: TenantInfo, as_json: bool) -> None:
    if as_json:
        click.echo(dump({**_tenant_json(info), "usage": info.usage, "overrides": info.overrides}))
        return
    created = info.created_at.isoformat(timespec="seconds") if info.created_at else "never"
    click.echo(f"tenant {info.tenant}  created {created}")
    if info.disabled_at is not None:
        since = info.disabled_at.isoformat(timespec="seconds")
        click.echo(f"DISABLED since {since} by {info.disabled_by}: keys and sessions refused")
    overrides = info.overrides or {}
    click.echo("quotas:")
    for name, value in info.quotas.items():
        shown = UNLIMITED if value is None else f"{value:g}" if isinstance(value, float) else value
        click.echo(f"  {name:<26} {shown}{'  (set for this tenant)' if name in overrides else ''}")
    click.echo("usage:")
    for name, value in (info.usage or {}).items():
        click.echo(f"  {name:<26} {value}")


# == keys ==============================================================================
@click.group()
def keys() -> None:
    """API keys: what the HTTP server accepts as `Authorization: Bearer <key>`."""


@keys.command("create")
@key_tenant_option
@click.option("--principal", required=True, help="Who the key acts as (a person or a service).")
@roles_option
@click.option(
    "--expires",
    default=None,
    help="When the key stops working: 90m, 12h, 30d, 2w, or an ISO-8601 time with a zone "
    "(default: never, until revoked).",
)
@db_option
def keys_create(tenant: str, principal: str, roles: str, expires: str | None, db: str) -> None:
    """Make an API key; prints it once, alone on stdout (only its hash is kept)."""
    expires_at = parse_expiry(expires, datetime.now(UTC)) if expires is not None else None
    with open_engine(db, must_exist=True) as engine:
        made = engine.create_key(principal, role_names(roles), expires_at=expires_at, tenant=tenant)
    until = f", expires {made.expires_at.isoformat(timespec='seconds')}" if made.expires_at else ""
    click.echo(
        f"key {made.key_id} for {made.principal} in tenant {made.tenant} "
        f"({', '.join(r.value for r in made.roles)}{until}): it is shown this once and "
        "cannot be shown again",
        err=True,
    )
    click.echo(made.key)


def _echo_keys(found: list[KeyInfo], as_json: bool, tenant: str) -> None:
    now = datetime.now(UTC)
    echo_found(
        found,
        as_json,
        lambda k: _key_json(k, now),
        KEY_COLUMNS,
        lambda k: _key_row(k, now),
        f"no keys in tenant {tenant}",
    )


answer_command(
    keys,
    "list",
    "List the keys of a tenant (never their secrets).",
    Engine.list_keys,
    _echo_keys,
    (key_tenant_option, json_option, db_option),
)


record_commands(
    keys,
    "key_id",
    key_tenant_option,
    ("revoke", Engine.revoke_key, "key {} revoked", "Revoke KEY_ID: it stops working at once."),
)
