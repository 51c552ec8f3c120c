"""Traces of runs: OpenTelemetry spans, when the application asks for them.

The decisions behind it (docs/decisions/0014-trace-context-travels-with-the-run.md):

- OpenTelemetry is optional (`pip install 'waypost[otel]'`) and this is the only module
  that imports it. Without the API package, or while no tracer provider is configured
  (the API's default is a proxy that records nothing), every function here returns at
  once: no span is made and no context stored (but for the next point).
- A run is one trace. Its start makes a span, a child of the caller's context (the
  active span of the code that called `start`, or the W3C `traceparent` an HTTP caller
  sent), and the run keeps that span's context in its RunStarted event (`trace`). Every
  workflow task and activity attempt of the run, in any process and after any restart,
  is a child of that stored context: it is read from the history (an activity task's
  spec carries a copy), never from memory.
- A `traceparent` an HTTP caller sent is kept with the run even when this process has
  no tracer provider: a worker that has one continues the caller's trace.
"""

from __future__ import annotations

import contextlib
import functools
import os
import re
import time
from collections.abc import Iterator, Mapping
from contextvars import ContextVar
from typing import Any

from waypost.model.logs import logger

try:
    from opentelemetry import context as otel_context, trace as otel
    from opentelemetry.context import Context

    AVAILABLE = True
except ImportError:  # the otel extra is not installed
    AVAILABLE = False

log = logger("waypost.tracing")
TRACE_KEY = "trace"  # RunStarted's data; an activity task's spec
_TRACEPARENT = re.compile(r"00-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})")

_caller: ContextVar[str | None] = ContextVar("waypost_caller_traceparent", default=None)


def parse_traceparent(value: Any) -> str | None:
    """`value` if it is a W3C trace context `traceparent` of version 00 (lower case, ids
    not all zeros), else None: an invalid one is ignored, as the recommendation asks,
    and never stored."""
    if not isinstance(value, str) or len(value) != 55:
        return None
    m = _TRACEPARENT.fullmatch(value)
    if m is None or m[1] == "0" * 32 or m[2] == "0" * 16:
        return None
    return value


@contextlib.contextmanager
def caller_context(traceparent: str | None) -> Iterator[None]:
    """Runs started inside this block continue the trace of `traceparent` (an HTTP
    caller's header), whether or not a tracer provider is configured here."""
    token = _caller.set(parse_traceparent(traceparent))
    try:
        yield
    finally:
        _caller.reset(token)


_own: tuple[Any, Any] | None = None  # (provider, its tracer) of `use_tracer_provider`
_global_tracer: Any = None  # the tracer of OpenTelemetry's global provider, once set
_look_again_at = 0.0  # while no global provider is set: when to look for one again
LOOK_EVERY = 1.0  # seconds; a provider set after the engine started is used this soon


def use_tracer_provider(provider: Any) -> None:
    """Record waypost's spans with `provider` rather than OpenTelemetry's global one
    (None: the global one again). OpenTelemetry sets its global provider once per
    process; this lets tests, or an application that keeps waypost's spans apart,
    choose another."""
    global _own, _look_again_at
    _own = None if provider is None else (provider, provider.get_tracer("waypost"))
    _look_again_at = 0.0


def _tracer() -> Any:
    """The tracer of the configured provider, or None when nothing records spans.

    Looking up OpenTelemetry's global provider reads the environment, which costs more
    than the rest of an untraced task: while there is none, it is looked for at most
    once a second. Once set, OpenTelemetry never changes it."""
    global _global_tracer, _look_again_at
    if not AVAILABLE:
        return None
    if _own is not None:
        return _own[1]
    if _global_tracer is not None:
        return _global_tracer
    now = time.monotonic()
    if now < _look_again_at:
        return None
    provider = otel.get_tracer_provider()
    if isinstance(provider, otel.ProxyTracerProvider | otel.NoOpTracerProvider):
        _look_again_at = now + LOOK_EVERY
        return None
    _global_tracer = provider.get_tracer("waypost")
    return _global_tracer


def enabled() -> bool:
    """Whether spans are recorded (a tracer provider is configured)."""
    return _tracer() is not None


def traceparent_of(span: Any) -> str | None:
    """The `traceparent` that makes a span's children (None for an invalid span)."""
    sc = span.get_span_context()
    if not sc.is_valid:
        return None
    return f"00-{sc.trace_id:032x}-{sc.span_id:016x}-{int(sc.trace_flags):02x}"


def log_ids() -> dict[str, str] | None:
    """The active span's `trace_id` and `span_id` (hex), for log lines; None untraced."""
    if _tracer() is None:
        return None
    sc = otel.get_current_span().get_span_context()
    if not sc.is_valid:
        return None
    return {"trace_id": f"{sc.trace_id:032x}", "span_id": f"{sc.span_id:016x}"}


def current_traceparent() -> str | None:
    """The `traceparent` of the active span (what an outgoing request carries), or None."""
    if _tracer() is None:
        return None
    return traceparent_of(otel.get_current_span())


def _parent(traceparent: Any) -> Any:
    """An OpenTelemetry context whose span is the remote `traceparent` (anything else: a
    new trace, not a child of the active span). Built on an empty context, so the same
    `traceparent` gives the same context: the run's tasks and attempts share one."""
    return _remote_context(traceparent if isinstance(traceparent, str) else "")


@functools.lru_cache(maxsize=1024)
def _remote_context(traceparent: str) -> Any:
    m = _TRACEPARENT.fullmatch(traceparent)
    if m is None:
        return otel.set_span_in_context(otel.INVALID_SPAN, Context())
    context = otel.SpanContext(
        trace_id=int(m[1], 16),
        span_id=int(m[2], 16),
        is_remote=True,
        trace_flags=otel.TraceFlags(int(m[3], 16)),
    )
    return otel.set_span_in_context(otel.NonRecordingSpan(context), Context())


def _attributes(fields: Mapping[str, Any]) -> dict[str, Any]:
    return {f"waypost.{k}": v for k, v in fields.items() if v is not None}


def start_span(**fields: Any) -> contextlib.AbstractContextManager[str | None]:
    """Around a run's start: the `traceparent` to keep with the run (None: none to keep).

    With a tracer provider, a span `waypost start` is made as a child of the active span
    (or of an HTTP caller's `traceparent`), and its context is what the run keeps.
    Without one, an HTTP caller's `traceparent` is kept as it came.
    """
    tracer = _tracer()
    caller = _caller.get()
    if tracer is None:
        return contextlib.nullcontext(caller)
    return _traced_start(tracer, caller, fields)


@contextlib.contextmanager
def _traced_start(tracer: Any, caller: str | None, fields: dict[str, Any]) -> Iterator[str | None]:
    parent = _parent(caller) if caller is not None else None
    with tracer.start_as_current_span(
        "waypost start",
        context=parent,
        kind=otel.SpanKind.PRODUCER,
        attributes=_attributes(fields),
    ) as span:
        yield traceparent_of(span)


class TaskSpan:
    """A workflow task's span. Its parent is known only once the run is read (`begin`
    with its RunStarted's data); it is dated from when the task was claimed."""

    __slots__ = ("active", "fields", "span", "started_ns")

    def __init__(self, fields: dict[str, Any]) -> None:
        self.fields = fields
        self.started_ns = time.time_ns()
        self.span: Any = None
        self.active: Any = None  # the token that made it the active span

    def begin(self, started: Mapping[str, Any]) -> None:
        tracer = _tracer()
        if tracer is None or self.span is not None:
            return
        fields = {
            **self.fields,
            "workflow": started.get("workflow"),
            "workflow.version": started.get("version"),
        }
        self.span = tracer.start_span(
            "waypost workflow task",
            context=_parent(started.get(TRACE_KEY)),
            kind=otel.SpanKind.CONSUMER,
            attributes=_attributes(fields),
            start_time=self.started_ns,
        )
        # The active span until it ends (log lines name it), in the task that began it.
        self.active = otel_context.attach(otel.set_span_in_context(self.span))

    def finished(self, status: str) -> None:
        """The task's decisions are committed; the run's status is now `status`."""
        if self.span is not None and status:
            self.span.set_attribute("waypost.run.status", status)

    def end(self, error: BaseException | None = None) -> None:
        span, self.span = self.span, None
        if span is None:
            return
        active, self.active = self.active, None
        if active is not None:
            otel_context.detach(active)
        if error is not None:
            span.record_exception(error)
            span.set_status(otel.Status(otel.StatusCode.ERROR, type(error).__name__))
        span.end()

    def __enter__(self) -> TaskSpan:
        return self

    def __exit__(self, kind: Any, error: BaseException | None, tb: Any) -> None:
        self.end(error if isinstance(error, Exception) else None)


def workflow_task(tenant: str, run_id: str, fence: int) -> TaskSpan:
    """The span of a workflow task claimed now (nothing is recorded before `begin`)."""
    return TaskSpan({"run_id": run_id, "tenant": tenant, "task.fence": fence})


def attempt_trace(started: Mapping[str, Any]) -> dict[str, Any] | None:
    """What an activity task's spec carries of its run's trace (its attempts' parent, and
    the run's workflow and version for their attributes), if the run keeps one."""
    traceparent = started.get(TRACE_KEY)
    if traceparent is None:
        return None
    return {
        "traceparent": traceparent,
        "workflow": started.get("workflow"),
        "workflow.version": started.get("version"),
    }


def attempt_span(spec: Mapping[str, Any], **fields: Any) -> contextlib.AbstractContextManager[Any]:
    """An activity attempt's span, the active span while the attempt runs (so spans the
    activity makes, and the `traceparent` of an http step's request, are its children);
    `spec` is the activity task's (`attempt_trace` put the run's trace in it)."""
    tracer = _tracer()
    if tracer is None:
        return _UNTRACED
    trace = spec.get(TRACE_KEY)
    trace = trace if isinstance(trace, dict) else {}
    fields.update({k: v for k, v in trace.items() if k != "traceparent"})
    span: contextlib.AbstractContextManager[Any] = tracer.start_as_current_span(
        "waypost activity",
        context=_parent(trace.get("traceparent")),
        kind=otel.SpanKind.CONSUMER,
        attributes=_attributes(fields),
    )
    return span


_UNTRACED: contextlib.nullcontext[None] = contextlib.nullcontext()


def failed(description: str) -> None:
    """Mark the active span as failed (an attempt whose activity raised)."""
    if _tracer() is not None:
        span = otel.get_current_span()
        span.set_attribute("error.type", description)
        span.set_status(otel.Status(otel.StatusCode.ERROR, description))


@contextlib.contextmanager
def client_span(method: str, scheme: str, host: str, port: int) -> Iterator[Any]:
    """An outgoing HTTP request's span, with the semantic conventions' attributes (not
    the URL's path or query: they often hold secrets, as chat webhooks' do); yields the
    span (None without a tracer provider) for `traceparent_of` and `response_status`."""
    tracer = _tracer()
    if tracer is None:
        yield None
        return
    attributes = {
        "http.request.method": method,
        "url.scheme": scheme,
        "server.address": host,
        "server.port": port,
    }
    with tracer.start_as_current_span(
        method, kind=otel.SpanKind.CLIENT, attributes=attributes
    ) as span:
        yield span


def response_status(span: Any, status: int) -> None:
    if span is not None:
        span.set_attribute("http.response.status_code", status)
        if status >= 500:  # a client span's 4xx is the caller's answer, not its error
            span.set_attribute("error.type", str(status))
            span.set_status(otel.Status(otel.StatusCode.ERROR))


def configure_from_environment() -> bool:
    """Send spans to the OTLP endpoint the standard environment names.

    With OTEL_EXPORTER_OTLP_ENDPOINT (or OTEL_EXPORTER_OTLP_TRACES_ENDPOINT) set, and the
    SDK and an OTLP exporter installed, sets a tracer provider (service name and
    resource from OTEL_SERVICE_NAME and OTEL_RESOURCE_ATTRIBUTES) with a batching
    processor, unless one is set already. What `waypost worker` and `waypost server`
    do; an application that embeds the engine configures its own provider instead.
    """
    if not (
        os.environ.get("OTEL_EXPORTER_OTLP_ENDPOINT")
        or os.environ.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
    ):
        return False
    if not AVAILABLE:
        return False
    if not isinstance(otel.get_tracer_provider(), otel.ProxyTracerProvider):
        return False  # the application set one
    try:
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import (  # type: ignore[import-not-found,unused-ignore]
            OTLPSpanExporter,
        )
        from opentelemetry.sdk.resources import Resource
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import BatchSpanProcessor
    except ImportError as exc:
        log.warning(
            "OTEL_EXPORTER_OTLP_ENDPOINT is set but no traces are sent: %s "
            "(pip install 'waypost[otlp]')",
            exc,
        )
        return False
    resource = Resource.create({"service.name": os.environ.get("OTEL_SERVICE_NAME", "waypost")})
    provider = TracerProvider(resource=resource)
    provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))
    otel.set_tracer_provider(provider)
    global _look_again_at
    _look_again_at = 0.0
    return True
