"""`waypost server`: the HTTP API and the approval pages, with workers, in one command."""

from __future__ import annotations

import os
import signal
from typing import Any, cast

import click

from waypost.engine import tracing
from waypost.errors import WaypostError
from waypost.model.logs import configure_logging
from waypost.store import open_store, redact_url

from .common import (
    Serving,
    app_option,
    db_option,
    log_format_option,
    sender_from_spec,
    worker_options,
)
from .stopping import say_on_stderr


@click.command("server")
@db_option
@app_option("Module whose workflows and activities the server's processes serve (repeatable).")
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
    "--compute-processes",
    type=click.IntRange(0, 64),
    default=1,
    show_default=True,
    help="Processes beside each server process that run definition runs, queries, replay "
    "views, updates' validation and verification (a tenant's expensive work), at a lower "
    "priority; 0 runs them in the server process.",
)
@click.option(
    "--max-requests-in-flight",
    type=click.IntRange(0, 10_000),
    default=8,
    show_default=True,
    help="Requests of one caller (API key, console session, or address) each server "
    "process works on at once; more wait their turn (up to 64, then 429). 0: no bound.",
)
@click.option(
    "--compute-cpu-limit",
    type=click.FloatRange(0.01, 3600),
    default=10.0,
    show_default=True,
    help="Seconds of CPU one replay, query or definition run's activation may take before "
    "it is stopped (the run is suspended, the query refused).",
)
@click.option(
    "--max-body",
    type=click.IntRange(1024),
    default=4 * 1024 * 1024,
    show_default=True,
    help="Largest request body accepted, in bytes.",
)
@click.option(
    "--metrics/--no-metrics",
    default=True,
    show_default=True,
    help="Serve Prometheus metrics at /metrics.",
)
@click.option(
    "--metrics-token",
    envvar="WAYPOST_METRICS_TOKEN",
    default=None,
    help="A scrape of /metrics must bring this as a bearer token (or set "
    "WAYPOST_METRICS_TOKEN, which keeps it out of the process list); without it /metrics "
    "is open.",
)
@click.option(
    "--trusted-proxy",
    "trusted_proxies",
    multiple=True,
    envvar="WAYPOST_TRUSTED_PROXIES",
    metavar="CIDR[,CIDR]",
    help="Proxies (addresses or networks) whose X-Forwarded-For, -Proto and -Host headers "
    "are believed: the client's address (sign-in throttling), https (Secure cookies, HSTS, "
    "the console's Origin check). Without it, no forwarded header is believed.",
)
@click.option(
    "--header-timeout",
    type=click.FloatRange(0.1, 3600),
    default=10.0,
    show_default=True,
    help="Seconds a connection may take to send a request's headers before it is closed.",
)
@worker_options
@log_format_option
def server(
    db: str,
    apps: tuple[str, ...],
    host: str,
    port: int,
    processes: int,
    api_only: bool,
    compute_processes: int,
    compute_cpu_limit: float,
    max_requests_in_flight: int,
    max_body: int,
    metrics: bool,
    metrics_token: str | None,
    trusted_proxies: tuple[str, ...],
    header_timeout: float,
    serving: Serving,
    log_format: str,
) -> None:
    """Serve the web console (/), the HTTP API (/v1, /openapi.json), the approval pages
    (/approve/...), health checks (/healthz, /readyz) and Prometheus metrics (/metrics)
    until SIGTERM/SIGINT.

    A `traceparent` header on POST /v1/runs makes the run part of the caller's trace.
    With OTEL_EXPORTER_OTLP_ENDPOINT set (and the otel extra and an OTLP exporter
    installed), each process sends the runs' traces there."""
    try:
        import uvicorn

        from waypost.server.app import SETTINGS_VARIABLE, ServerSettings
        from waypost.server.connections import protocol
        from waypost.server.console.security import new_secret_text
        from waypost.server.proxies import TrustedProxies

        from .serving import check_address, serve
    except ImportError as exc:
        raise click.ClickException(
            f"the server needs its extra: pip install 'waypost[server]' ({exc})"
        ) from exc
    from waypost.runtime.registry import items_in_modules

    check_address(host, port)  # a taken port is said before anything is opened or printed
    try:
        items_in_modules(apps)  # a wrong --app is said here, once, not in every process
        open_store(db)  # and so is a wrong URL
    except WaypostError as exc:
        raise click.ClickException(str(exc)) from exc
    sender_from_spec(serving.notify)
    try:
        proxies = TrustedProxies.parse(trusted_proxies)
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="--trusted-proxy") from None
    shown_host = "127.0.0.1" if host in ("0.0.0.0", "::", "") else host
    if ":" in shown_host:
        shown_host = f"[{shown_host}]"
    base_url = serving.approval_url or f"http://{shown_host}:{port}"
    settings = ServerSettings(
        db=db,
        apps=list(apps),
        serve=not api_only,
        max_body=max_body,
        engine_options={
            **serving.engine_options(),
            "approval_url": base_url,
            "compute_cpu_limit": compute_cpu_limit,
        },
        notify=serving.notify,
        metrics=metrics,
        metrics_token=metrics_token or None,
        log_format=log_format,
        # One console secret for every process; from the environment, it also outlives a
        # restart (else a restart signs everyone out of the console).
        console_secret=os.environ.get("WAYPOST_CONSOLE_SECRET") or new_secret_text(),
        trusted_proxies=proxies.texts(),
        compute_processes=compute_processes,
        max_requests_in_flight=max_requests_in_flight,
    )
    os.environ[SETTINGS_VARIABLE] = settings.to_json()
    configure_logging(log_format, tracing.log_ids)
    work = "API only" if api_only else f"serving {len(apps)} app module(s) and definitions"
    banner = (
        f"waypost server on http://{shown_host}:{port} ({processes} process"
        f"{'es' if processes > 1 else ''}, {work}) on {redact_url(db)}; approval links "
        f"open {base_url}/approve/..."
    )
    say_on_stderr(banner, log_format, "waypost.server")
    # uvicorn stops gracefully on SIGTERM/SIGINT, then raises the signal again to the
    # handler found before it: this one, so that a clean stop exits 0 (as a worker does).
    # A second Ctrl-C stops at once (serving.py).
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: None)
    serve(
        "waypost.server.app:app_from_environment",
        processes,
        log_format,
        factory=True,
        host=host,
        port=port,
        log_level="warning",
        # In JSON, uvicorn's own lines go through the root logger's formatter too.
        log_config=None if log_format == "json" else uvicorn.config.LOGGING_CONFIG,
        access_log=False,
        proxy_headers=False,  # forwarded headers: only from --trusted-proxy (proxies.py)
        server_header=False,
        # h11 with a deadline on each request's headers (connections.py)
        http=cast(Any, protocol(header_timeout)),
        timeout_graceful_shutdown=int(serving.grace),
    )
