"""Prometheus metrics of an engine: counters the engine's observer feeds, gauges read
from the database at scrape time (`Metrics`), and their own HTTP port for a worker
(`serve_metrics`). Needs the `metrics` extra (`prometheus-client`)."""

from __future__ import annotations

from .gauges import StoreGauges
from .metrics import Metrics
from .serving import MetricsServer, serve_metrics

__all__ = ["Metrics", "MetricsServer", "StoreGauges", "serve_metrics"]
