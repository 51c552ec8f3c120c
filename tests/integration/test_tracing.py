"""Traces of runs: one trace from the caller's span to an http step's request.

A real engine on each store records its spans with the OpenTelemetry SDK's in-memory
exporter; a real local HTTP server (stdlib, in a thread, on the engine's http
allow-list) records the `traceparent` header each request brings. A run started inside
a caller's span, or by `POST /v1/runs` with a `traceparent` header, must put every
workflow task, activity attempt and the http request in the caller's trace, also when
another engine (fresh memory) carries the run on.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, StatusCode

import waypost as wp
from tests.helpers import eventually
from tests.helpers.http_server import Answer, LocalServer, Received, serving
from tests.integration.server_fixtures import Api, make_key, serve
from waypost.engine import tracing
from waypost.features.http import HTTP_ACTIVITY

__all__ = ["serve"]

pytestmark = pytest.mark.timeout(120)

DEFINITION = """
name: traced_order
start: tell_supplier
steps:
  tell_supplier:
    type: activity
    http:
      url: {base}/orders
      body: {{reference: order_id}}
    retry: {{max_attempts: 3, initial_interval: 0}}
    output: $.supplier
    next: pack
  pack:
    type: activity
    activity: pack
    input: {{order: order_id}}
    output: $.packed
    next: done
  done: {{type: succeed, output: packed}}
"""


@wp.activity(name="pack")
def pack(ctx: wp.ActivityContext, order: str) -> str:
    return f"packed {order}"


class Supplier(LocalServer):
    """A local HTTP server that records the `traceparent` of every request it answers."""

    def __init__(self) -> None:
        self.traceparents: list[str | None] = []
        self.busy = 0  # answer this many requests 503 first
        super().__init__(self._answer)

    def _answer(self, request: Received) -> Answer:
        self.traceparents.append(request.headers.get("traceparent"))
        status = 503 if self.busy > 0 else 200
        self.busy -= 1
        return Answer(status, b'{"id": "po-1"}', {"Content-Type": "application/json"})


@pytest.fixture
def supplier() -> Iterator[Supplier]:
    yield from serving(Supplier())


@pytest.fixture
def spans() -> Iterator[InMemorySpanExporter]:
    """The spans waypost records during the test (its own provider, not the global one)."""
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracing.use_tracer_provider(provider)
    try:
        yield exporter
    finally:
        tracing.use_tracer_provider(None)
        provider.shutdown()


@pytest.fixture
def engine_for(
    make_engine: Callable[..., wp.Engine], supplier: Supplier
) -> Callable[..., wp.Engine]:
    def make(**options: Any) -> wp.Engine:
        engine = make_engine(pack, http_allow=[f"127.0.0.1:{supplier.port}"], **options)
        engine.publish(DEFINITION.format(base=supplier.base))
        return engine

    return make


Shop = tuple[wp.Engine, str, Callable[[], str]]


@pytest.fixture
def shop(engine_for: Callable[..., wp.Engine], serve: Callable[..., str]) -> Shop:
    """An engine of `engine_for`, the API key of its starter `shop`, and what serves the
    engine over HTTP (its base URL)."""
    engine = engine_for()
    return engine, make_key(engine, "default", "shop", "starter"), lambda: serve(engine)


def named(found: list[ReadableSpan], name: str) -> list[ReadableSpan]:
    return [s for s in found if s.name == name]


def one_post_ended(spans: InMemorySpanExporter) -> None:
    """Waits until the span of one POST has ended."""
    eventually(lambda: len(named(list(spans.get_finished_spans()), "POST")) == 1, "spans")


def attrs(span: ReadableSpan) -> dict[str, Any]:
    return dict(span.attributes or {})


def check_caller_s_trace(
    spans: InMemorySpanExporter, parent: Any, run_id: str, supplier: Supplier
) -> None:
    """`check_one_trace` of every ended span, for a run started under the span `parent`."""
    context = parent.get_span_context()
    found = list(spans.get_finished_spans())
    check_one_trace(found, context.trace_id, context.span_id, run_id, supplier)


def check_one_trace(
    found: list[ReadableSpan], trace_id: int, parent_span_id: int, run_id: str, supplier: Supplier
) -> None:
    """Every span of the run is in `trace_id`, under the start span (a child of
    `parent_span_id`), and carries the run's attributes; the request's traceparent is
    its client span's."""
    assert found and {s.context.trace_id for s in found} == {trace_id}
    (start,) = named(found, "waypost start")
    assert start.parent is not None and start.parent.span_id == parent_span_id
    assert start.kind is SpanKind.PRODUCER
    assert attrs(start)["waypost.run_id"] == run_id
    assert attrs(start)["waypost.workflow"] == "traced_order"

    tasks = named(found, "waypost workflow task")
    # The start, the http step's result and the pack step's result: three decisions.
    assert len(tasks) >= 3
    for task in tasks:
        assert task.parent is not None and task.parent.span_id == start.context.span_id
        a = attrs(task)
        assert a["waypost.run_id"] == run_id
        assert a["waypost.tenant"] == "default"
        assert a["waypost.workflow"] == "traced_order"
        assert a["waypost.workflow.version"] == "1"
    assert "completed" in {attrs(t).get("waypost.run.status") for t in tasks}

    attempts = {attrs(s)["waypost.activity"]: s for s in named(found, "waypost activity")}
    assert set(attempts) == {HTTP_ACTIVITY, "pack"}
    for name, attempt in attempts.items():
        assert attempt.parent is not None and attempt.parent.span_id == start.context.span_id
        a = attrs(attempt)
        assert (a["waypost.run_id"], a["waypost.attempt"], a["waypost.tenant"]) == (
            run_id,
            1,
            "default",
        )
        assert a["waypost.step"] and a["waypost.workflow.version"] == "1", name
    assert attrs(attempts["pack"])["waypost.step"] != attrs(attempts[HTTP_ACTIVITY])["waypost.step"]

    (request,) = named(found, "POST")
    assert request.kind is SpanKind.CLIENT
    assert request.parent is not None
    assert request.parent.span_id == attempts[HTTP_ACTIVITY].context.span_id
    a = attrs(request)
    assert a["http.request.method"] == "POST"
    assert (a["server.address"], a["server.port"]) == ("127.0.0.1", supplier.port)
    assert a["http.response.status_code"] == 200
    assert "url.full" not in a  # paths and queries may be secrets
    (sent,) = supplier.traceparents
    assert sent is not None
    assert sent[:53] == f"00-{trace_id:032x}-{request.context.span_id:016x}-"
    assert int(sent[53:], 16) & 1  # sampled


def test_a_run_started_in_a_span_is_one_trace_down_to_its_http_request(
    engine_for: Callable[..., wp.Engine], supplier: Supplier, spans: InMemorySpanExporter
) -> None:
    engine = engine_for()
    caller = TracerProvider().get_tracer("the caller")  # the application's own tracer
    with engine.running():
        with caller.start_as_current_span("checkout") as parent:
            run = engine.start("traced_order", {"order_id": "A-1"})
        assert run.result(timeout=30) == "packed A-1"
    check_caller_s_trace(spans, parent, run.run_id, supplier)
    # The trace is kept with the run: the start span's context, in RunStarted.
    first = engine.history(run.run_id)[0]
    (start,) = named(list(spans.get_finished_spans()), "waypost start")
    assert first.data["trace"] == tracing.traceparent_of(start)


def test_a_retried_attempt_is_a_span_of_the_same_trace(
    engine_for: Callable[..., wp.Engine], supplier: Supplier, spans: InMemorySpanExporter
) -> None:
    supplier.busy = 1
    engine = engine_for()
    caller = TracerProvider().get_tracer("the caller")
    with engine.running():
        with caller.start_as_current_span("checkout") as parent:
            run = engine.start("traced_order", {"order_id": "R-1"})
        assert run.result(timeout=30) == "packed R-1"
    trace_id = parent.get_span_context().trace_id
    found = list(spans.get_finished_spans())
    assert {s.context.trace_id for s in found} == {trace_id}
    tries = [
        s for s in named(found, "waypost activity") if attrs(s)["waypost.activity"] == HTTP_ACTIVITY
    ]
    assert sorted(attrs(s)["waypost.attempt"] for s in tries) == [1, 2]
    first = next(s for s in tries if attrs(s)["waypost.attempt"] == 1)
    assert first.status.status_code is StatusCode.ERROR
    assert attrs(first)["error.type"] == "HttpStepRetryable"
    requests = sorted(named(found, "POST"), key=lambda s: s.start_time or 0)
    assert [attrs(r)["http.response.status_code"] for r in requests] == [503, 200]
    assert requests[0].status.status_code is StatusCode.ERROR
    assert attrs(requests[0])["error.type"] == "503" and "error.type" not in attrs(requests[1])
    sent = supplier.traceparents
    assert [t[3:35] if t else None for t in sent] == [f"{trace_id:032x}"] * 2
    assert [t[36:52] if t else None for t in sent] == [
        f"{r.context.span_id:016x}" for r in requests
    ]


def test_another_engine_continues_the_trace_from_the_store(
    engine_for: Callable[..., wp.Engine], supplier: Supplier, spans: InMemorySpanExporter
) -> None:
    first = engine_for()  # serves nothing: the run waits in the store
    caller = TracerProvider().get_tracer("the caller")
    with caller.start_as_current_span("checkout") as parent:
        run = first.start("traced_order", {"order_id": "B-2"})
    first.close()
    assert [s.name for s in spans.get_finished_spans()] == ["waypost start"]
    second = engine_for()
    with second.running():
        assert second.result(run.run_id, timeout=30) == "packed B-2"
    check_caller_s_trace(spans, parent, run.run_id, supplier)


def test_a_run_started_outside_any_span_is_a_trace_of_its_own(
    engine_for: Callable[..., wp.Engine], supplier: Supplier, spans: InMemorySpanExporter
) -> None:
    engine = engine_for()
    with engine.running():
        run = engine.start("traced_order", {"order_id": "C-3"})
        assert run.result(timeout=30) == "packed C-3"
    found = list(spans.get_finished_spans())
    (start,) = named(found, "waypost start")
    assert start.parent is None
    assert {s.context.trace_id for s in found} == {start.context.trace_id}


def test_an_http_caller_s_traceparent_makes_the_run_part_of_its_trace(
    shop: Shop, supplier: Supplier, spans: InMemorySpanExporter
) -> None:
    engine, key, serve_shop = shop
    trace_id, parent_id = 0x4BF92F3577B34DA6A3CE929D0E0E4736, 0x00F067AA0BA902B7
    with engine.running(), Api(serve_shop(), key) as api:
        answer = api.post(
            "/v1/runs",
            json={"workflow": "traced_order", "input": {"order_id": "D-4"}},
            headers={"traceparent": f"00-{trace_id:032x}-{parent_id:016x}-01"},
        )
        assert answer.status_code == 201, answer.text
        run_id = answer.json()["run_id"]
        assert engine.result(run_id, timeout=30) == "packed D-4"
        one_post_ended(spans)
    # Checked once the engine has stopped: the last decision's span ends after the commit
    # that ended the run, which is what `result` saw, so it may still be open above.
    check_one_trace(list(spans.get_finished_spans()), trace_id, parent_id, run_id, supplier)


def test_the_http_client_sends_its_caller_s_context(
    shop: Shop, supplier: Supplier, spans: InMemorySpanExporter
) -> None:
    engine, key, serve_shop = shop
    caller = TracerProvider().get_tracer("the caller")
    with engine.running(), wp.Client(serve_shop(), key) as client:
        with caller.start_as_current_span("checkout") as parent:
            run_id = client.start("traced_order", {"order_id": "F-6"})
        assert client.result(run_id, timeout=30) == "packed F-6"
        one_post_ended(spans)
    check_caller_s_trace(spans, parent, run_id, supplier)


@pytest.mark.parametrize(
    "header",
    [
        "00-00000000000000000000000000000000-00f067aa0ba902b7-01",  # all-zero trace id
        "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01",  # all-zero span id
        "00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01",  # upper case
        "ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",  # unknown version
        "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-00",  # too long for 00
        "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-zz",  # not hex
        pytest.param("x" * 5000, id="huge"),
        "",
    ],
)
def test_an_invalid_traceparent_is_ignored_and_never_stored(
    make_engine: Callable[..., wp.Engine], serve: Callable[..., str], header: str
) -> None:
    # No tracer provider here: a valid header would be stored as it came.
    engine = make_engine()
    engine.publish("name: noop\nstart: done\nsteps:\n  done: {type: succeed}\n")
    key = make_key(engine, "default", "shop", "starter")
    with Api(serve(engine), key) as api:
        answer = api.post("/v1/runs", json={"workflow": "noop"}, headers={"traceparent": header})
        assert answer.status_code == 201, answer.text
        first = engine.history(answer.json()["run_id"])[0]
        assert "trace" not in first.data
        good = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
        answer = api.post("/v1/runs", json={"workflow": "noop"}, headers={"traceparent": good})
        assert engine.history(answer.json()["run_id"])[0].data["trace"] == good


def test_without_a_tracer_provider_nothing_is_recorded_or_stored(
    engine_for: Callable[..., wp.Engine], supplier: Supplier
) -> None:
    engine = engine_for()
    assert not tracing.enabled()
    caller = TracerProvider().get_tracer("the caller")
    with engine.running(), caller.start_as_current_span("checkout"):
        run = engine.start("traced_order", {"order_id": "E-5"})
        assert run.result(timeout=30) == "packed E-5"
    assert "trace" not in engine.history(run.run_id)[0].data
    assert supplier.traceparents == [None]


WITHOUT_OTEL = """
import sys

sys.modules["opentelemetry"] = None  # as if the otel extra were not installed: import fails
import waypost as wp
from waypost.engine import tracing

assert not tracing.AVAILABLE and not tracing.enabled()


@wp.activity
def hello(ctx, name):
    return "hello " + name


@wp.workflow(name="greet")
async def greet(ctx, name):
    return await ctx.run(hello, name)


with wp.Engine(sys.argv[1]) as engine:
    engine.register(greet, hello)
    with engine.running(), tracing.caller_context(sys.argv[2]):
        run = engine.start(greet, "otel-less")
        print(run.result(timeout=30), engine.history(run.run_id)[0].data.get("trace"))
"""


def test_the_engine_runs_without_opentelemetry_installed(tmp_path: Path) -> None:
    good = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
    proc = subprocess.run(
        [sys.executable, "-c", WITHOUT_OTEL, f"sqlite:///{tmp_path / 'w.db'}", good],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    # An HTTP caller's traceparent is still kept with the run.
    assert proc.stdout.split() == ["hello", "otel-less", good]
