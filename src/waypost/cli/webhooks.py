"""The `waypost webhooks` commands: a tenant's webhook sources.

A source's secret is printed once, alone on stdout (`SECRET=$(waypost webhooks
create ...)`), when it is made; the server keeps it to check signatures, and no
command shows it again.
"""

from __future__ import annotations

from typing import Any

import click

from waypost.client.sync import Engine
from waypost.model.records import WebhookSourceInfo

from .common import (
    db_option,
    json_option,
    list_command,
    open_engine,
    record_commands,
    record_json,
)

tenant_option = click.option("--tenant", required=True, help="The tenant of the sources.")


def _source_json(source: WebhookSourceInfo) -> dict[str, Any]:
    return record_json(
        source,
        "source",
        "tenant",
        "signal",
        "correlate_key",
        "correlate_path",
        "tolerance_seconds",
        "created_at",
        "created_by",
        "url_id",
        "url_path",
    )


def _row(s: WebhookSourceInfo) -> tuple[str, ...]:
    return (
        s.source,
        s.url_path,
        s.signal,
        s.correlate_key,
        s.correlate_path,
        f"{s.tolerance_seconds}s",
    )


@click.group()
def webhooks() -> None:
    """Webhook sources: signed POSTs to /v1/webhooks/URL_ID signal the runs waiting for them."""


@webhooks.command("create")
@click.argument("source")
@tenant_option
@click.option("--signal", required=True, help="The signal its deliveries send.")
@click.option("--key", required=True, help="The correlation key runs wait with.")
@click.option("--path", required=True, help="Where the value is in the JSON body: data.id.")
@click.option(
    "--tolerance",
    type=int,
    default=300,
    show_default=True,
    help="Seconds a delivery's timestamp may be from now.",
)
@db_option
def webhooks_create(
    source: str, tenant: str, signal: str, key: str, path: str, tolerance: int, db: str
) -> None:
    """Register SOURCE; prints its signing secret once, alone on stdout."""
    with open_engine(db, must_exist=True) as engine:
        made = engine.create_webhook_source(
            source, signal=signal, key=key, path=path, tolerance_seconds=tolerance, tenant=tenant
        )
    click.echo(
        f"webhook source {made.source} in tenant {made.tenant}: POST {made.url_path} "
        f"signals {made.signal!r} to the runs waiting with ({made.correlate_key!r}, the body's "
        f"{made.correlate_path}); its secret is shown this once",
        err=True,
    )
    click.echo(made.secret)


list_command(
    webhooks,
    "List the webhook sources of a tenant (never their secrets).",
    Engine.webhook_sources,
    ("SOURCE", "URL PATH", "SIGNAL", "KEY", "KEY PATH", "TOLERANCE"),
    _row,
    to_json=_source_json,
    none="no webhook sources in tenant {tenant}",
    options=(tenant_option, json_option, db_option),
)


record_commands(
    webhooks,
    "source",
    tenant_option,
    (
        "delete",
        Engine.delete_webhook_source,
        "webhook source {} deleted",
        "Delete SOURCE: its deliveries are refused at once.",
    ),
)
