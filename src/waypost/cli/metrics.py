"""`waypost worker --metrics-port`: the worker's metrics on a port of its own."""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator
from typing import TYPE_CHECKING

import click

from waypost.client.sync import Engine

if TYPE_CHECKING:
    from waypost.observability import Metrics


def metrics_observer() -> Metrics:
    """The Prometheus observer, or a clean error when its extra is not installed."""
    try:
        from waypost.observability import Metrics
    except ImportError as exc:
        raise click.ClickException(
            f"metrics need their extra: pip install 'waypost[metrics]' ({exc})"
        ) from exc
    return Metrics()


@contextlib.contextmanager
def exporting(
    metrics: Metrics | None, engine: Engine, host: str, port: int | None
) -> Iterator[None]:
    """Serve `metrics` (with the gauges of `engine`'s database) on `host:port` for the block."""
    if metrics is None or port is None:
        yield
        return
    from waypost.observability import serve_metrics

    metrics.watch_store(engine.aio.store, engine.aio.clock)
    try:
        server = serve_metrics(metrics, port, host, loop=engine.loop)
    except OSError as exc:
        raise click.ClickException(f"cannot serve metrics on {host}:{port}: {exc}") from exc
    shown = f"[{host}]" if ":" in host else host
    logging.getLogger("waypost.worker").info("metrics on http://%s:%d/metrics", shown, server.port)
    try:
        yield
    finally:
        server.close()
