"""A metrics port of its own, for a process that serves no HTTP API (`waypost worker
--metrics-port`): prometheus-client's HTTP server on a thread, answering from `metrics`.
"""

from __future__ import annotations

import asyncio
import threading
from dataclasses import dataclass
from wsgiref.simple_server import WSGIServer

from prometheus_client import start_http_server

from .metrics import Metrics


@dataclass
class MetricsServer:
    """A running metrics port; `close()` stops it."""

    server: WSGIServer
    thread: threading.Thread

    @property
    def port(self) -> int:
        return int(self.server.server_address[1])

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
        self.thread.join(5)


def serve_metrics(
    metrics: Metrics,
    port: int,
    host: str = "0.0.0.0",
    *,
    loop: asyncio.AbstractEventLoop | None = None,
) -> MetricsServer:
    """Answer GET /metrics (any path) on `host:port` from a thread. `loop` is the engine's
    event loop, where the database gauges are read (without it, they are read by the
    first scrape the loop itself answers, never here)."""
    if metrics.gauges is not None and loop is not None:
        metrics.gauges.loop = loop
    server, thread = start_http_server(port, host, registry=metrics.registry)
    return MetricsServer(server, thread)
