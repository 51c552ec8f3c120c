"""`waypost worker` sends its runs' spans to the OTLP endpoint the standard environment
names: a real worker process, a real local collector (stdlib HTTP server decoding the
protobuf export requests)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import waypost as wp
from tests.helpers import eventually
from tests.helpers.http_server import Answer, LocalServer, Received, serving

pytest.importorskip("opentelemetry.exporter.otlp.proto.http")
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
)

pytestmark = pytest.mark.timeout(120)

WAYPOST = Path(sys.executable).with_name("waypost")

APP = """
import logging

import waypost as wp


@wp.activity(name="wrap")
def wrap(ctx: wp.ActivityContext, gift: str) -> str:
    logging.getLogger("gifts").info("wrapping %s", gift)
    return f"wrapped {gift}"


@wp.workflow(name="present")
async def present(ctx: wp.WorkflowContext, gift: str) -> str:
    return await ctx.run(wrap, gift)
"""


class Collector(LocalServer):
    """Records the spans of every OTLP/HTTP export request: (name, trace id, attributes);
    `span_ids` by name."""

    def __init__(self) -> None:
        self.spans: list[tuple[str, str, dict[str, Any]]] = []
        self.span_ids: dict[str, list[str]] = {}
        self.resources: list[dict[str, Any]] = []
        super().__init__(self._export)
        self.url = self.base

    def _export(self, received: Received) -> Answer:
        request = ExportTraceServiceRequest()
        request.ParseFromString(received.body)
        for rs in request.resource_spans:
            self.resources.append({a.key: a.value.string_value for a in rs.resource.attributes})
            for ss in rs.scope_spans:
                for span in ss.spans:
                    attributes = {a.key: _value(a.value) for a in span.attributes}
                    self.spans.append((span.name, span.trace_id.hex(), attributes))
                    self.span_ids.setdefault(span.name, []).append(span.span_id.hex())
        return Answer(200, b"", {"Content-Type": "application/x-protobuf"})


def _value(v: Any) -> Any:
    return getattr(v, v.WhichOneof("value")) if v.WhichOneof("value") else None


@pytest.fixture
def collector() -> Iterator[Collector]:
    yield from serving(Collector())


def test_a_worker_exports_its_runs_spans_to_the_otlp_endpoint(
    tmp_path: Path, collector: Collector
) -> None:
    (tmp_path / "gift_app.py").write_text(APP)
    db = f"sqlite:///{tmp_path / 'gifts.db'}"
    traceparent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
    worker = subprocess.Popen(
        [str(WAYPOST), "worker", "--db", db, "--app", "gift_app", "--log-format", "json"],
        cwd=tmp_path,
        env={
            **os.environ,
            "PYTHONPATH": str(tmp_path),
            "OTEL_EXPORTER_OTLP_ENDPOINT": collector.url,
            "OTEL_SERVICE_NAME": "gift-worker",
            "OTEL_BSP_SCHEDULE_DELAY": "100",
        },
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        with wp.Engine(db) as client:  # no tracer provider here: the caller's header is kept

            def started() -> str | None:
                from waypost.engine import tracing

                try:
                    with tracing.caller_context(traceparent):
                        return client.start("present", "a book", run_id="gift-1").run_id
                except wp.UnknownWorkflow:
                    return None

            run_id = eventually(started, "the worker to serve the workflow", timeout=60)
            eventually(lambda: client.get(run_id).finished, "the run to finish", timeout=60)
        eventually(
            lambda: any(name == "waypost activity" for name, _, _ in collector.spans),
            "the worker to export its spans",
            timeout=30,
        )
    finally:
        worker.send_signal(signal.SIGTERM)
        _, err = worker.communicate(timeout=60)
    assert worker.returncode == 0, err
    names = {name for name, _, _ in collector.spans}
    assert {"waypost workflow task", "waypost activity"} <= names
    assert {trace for _, trace, _ in collector.spans} == {"4bf92f3577b34da6a3ce929d0e0e4736"}
    (attempt,) = [a for name, _, a in collector.spans if name == "waypost activity"]
    assert attempt["waypost.run_id"] == "gift-1" and attempt["waypost.attempt"] == 1
    assert all(r.get("service.name") == "gift-worker" for r in collector.resources)
    # JSON log lines name the active span: the activity's own line, its attempt's.
    lines = [json.loads(line) for line in err.splitlines()]
    assert not [line for line in lines if line["level"] in ("ERROR", "CRITICAL")], err
    (wrapping,) = [line for line in lines if line["logger"] == "gifts"]
    assert wrapping["trace_id"] == "4bf92f3577b34da6a3ce929d0e0e4736"
    assert [wrapping["span_id"]] == collector.span_ids["waypost activity"]
    assert wrapping["run_id"] == "gift-1" and wrapping["attempt"] == 1
    finished = [
        line for line in lines if line.get("task") == "workflow" and line.get("event") == "finished"
    ]
    assert finished and all(
        line["span_id"] in collector.span_ids["waypost workflow task"] for line in finished
    )
