"""The `waypost webhooks` commands: a tenant's webhook sources.

A source's secret is printed once, alone on stdout (`SECRET=$(waypost webhooks
create ...)`), when it is made; the server keeps it to check signatures, and no
command shows it again.
"""

from __future__ import annotations

from typing import Any

import click

from waypost.model.records import WebhookSourceInfo

from .common import db_option, dump, open_engine

tenant_option = click.option("--tenant", required=True, help="The tenant of the sources.")


def _source_json(source: WebhookSourceInfo) -> dict[str, Any]:
    return {
        "source": source.source,
        "tenant": source.tenant,
        "signal": source.signal,
        "correlate_key": source.correlate_key,
        "correlate_path": source.correlate_path,
        "tolerance_seconds": source.tolerance_seconds,
        "created_at": source.created_at.isoformat(),
        "created_by": source.created_by,
        "url_id": source.url_id,
        "url_path": source.url_path,
    }


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


@webhooks.command("list")
@tenant_option
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@db_option
def webhooks_list(tenant: str, as_json: bool, db: str) -> None:
    """List the webhook sources of a tenant (never their secrets)."""
    with open_engine(db, must_exist=True) as engine:
        found = engine.webhook_sources(tenant=tenant)
    if as_json:
        click.echo(dump([_source_json(s) for s in found]))
        return
    for s in found:
        click.echo(
            f"{s.source}  {s.url_path}  signal {s.signal}  key {s.correlate_key}  "
            f"path {s.correlate_path}  tolerance {s.tolerance_seconds}s"
        )
    if not found:
        click.echo(f"no webhook sources in tenant {tenant}", err=True)


@webhooks.command("delete")
@click.argument("source")
@tenant_option
@db_option
def webhooks_delete(source: str, tenant: str, db: str) -> None:
    """Delete SOURCE: its deliveries are refused at once."""
    with open_engine(db, must_exist=True) as engine:
        engine.delete_webhook_source(source, tenant=tenant)
    click.echo(f"webhook source {source} deleted")
