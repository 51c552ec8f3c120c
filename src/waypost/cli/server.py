"""`waypost server`: the HTTP API and the approval pages, with workers, in one command."""

from __future__ import annotations

import logging
import os
import signal
import sys

import click

from waypost.errors import WaypostError
from waypost.store import open_store, redact_url

from .common import db_option, sender_from_spec, worker_options


@click.command("server")
@db_option
@click.option(
    "--app",
    "apps",
    multiple=True,
    help="Module whose workflows and activities the server's processes serve (repeatable).",
)
@click.option("--host", default="127.0.0.1", show_default=True, help="Address to listen on.")
@click.option("--port", type=click.IntRange(0, 65535), default=8080, show_default=True)
@click.option(
    "--workers",
    "processes",
    type=click.IntRange(1, 64),
    default=1,
    show_default=True,
    help="Server processes (each serves the API, and runs workers unless --api-only).",
)
@click.option(
    "--api-only",
    is_flag=True,
    help="Serve the API and pages only: no workers or scheduler in these processes (run "
    "`waypost worker` elsewhere).",
)
@click.option(
    "--max-body",
    type=click.IntRange(1024),
    default=4 * 1024 * 1024,
    show_default=True,
    help="Largest request body accepted, in bytes.",
)
@worker_options
def server(
    db: str,
    apps: tuple[str, ...],
    host: str,
    port: int,
    processes: int,
    api_only: bool,
    max_body: int,
    lease: float,
    grace: float,
    cancel_grace: float | None,
    max_activities: int,
    notify: str,
    approval_url: str | None,
    http_allow: tuple[str, ...],
) -> None:
    """Serve the web console (/), the HTTP API (/v1, /openapi.json), the approval pages
    (/approve/...) and health checks (/healthz, /readyz) until SIGTERM/SIGINT."""
    try:
        import uvicorn

        from waypost.server.app import SETTINGS_VARIABLE, ServerSettings
        from waypost.server.console.security import new_secret_text
    except ImportError as exc:
        raise click.ClickException(
            f"the server needs its extra: pip install 'waypost[server]' ({exc})"
        ) from exc
    from waypost.runtime.registry import items_in_modules

    try:
        items_in_modules(apps)  # a wrong --app is said here, once, not in every process
        open_store(db)  # and so is a wrong URL
    except WaypostError as exc:
        raise click.ClickException(str(exc)) from exc
    sender_from_spec(notify)
    shown_host = "127.0.0.1" if host in ("0.0.0.0", "::", "") else host
    if ":" in shown_host:
        shown_host = f"[{shown_host}]"
    base_url = approval_url or f"http://{shown_host}:{port}"
    settings = ServerSettings(
        db=db,
        apps=list(apps),
        serve=not api_only,
        max_body=max_body,
        engine_options={
            "lease": lease,
            "shutdown_grace": grace,
            "cancel_grace": cancel_grace,
            "max_activities": max_activities,
            "approval_url": base_url,
            "http_allow": list(http_allow) or None,
        },
        notify=notify,
        # One console secret for every process; from the environment, it also outlives a
        # restart (else a restart signs everyone out of the console).
        console_secret=os.environ.get("WAYPOST_CONSOLE_SECRET") or new_secret_text(),
    )
    os.environ[SETTINGS_VARIABLE] = settings.to_json()
    logging.basicConfig(
        level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    work = "API only" if api_only else f"serving {len(apps)} app module(s) and definitions"
    click.echo(
        f"waypost server on http://{shown_host}:{port} ({processes} process"
        f"{'es' if processes > 1 else ''}, {work}) on {redact_url(db)}; approval links "
        f"open {base_url}/approve/...",
        err=True,
    )
    sys.stderr.flush()
    # uvicorn stops gracefully on SIGTERM/SIGINT, then raises the signal again to the
    # handler found before it: this one, so that a clean stop exits 0 (as a worker does).
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: None)
    uvicorn.run(
        "waypost.server.app:app_from_environment",
        factory=True,
        host=host,
        port=port,
        workers=processes if processes > 1 else None,
        log_level="warning",
        access_log=False,
        proxy_headers=False,
        server_header=False,
        timeout_graceful_shutdown=int(grace),
    )
