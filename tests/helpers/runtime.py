"""`Driver`: one run of one workflow on the replay runtime, fed event by event as the
engine feeds it, no database; with the activities the runtime tests schedule (never
executed: the Driver plays their results)."""

from __future__ import annotations

import dataclasses
import inspect
import json
import os
import uuid
from collections.abc import Callable
from typing import Any

import waypost as wp
from waypost.model.chain import seal
from waypost.model.codec import JsonCodec
from waypost.model.events import TERMINAL_EVENTS, Event, EventType, NewEvent
from waypost.runtime.instance import WorkflowInstance
from waypost.runtime.registry import Registry

from .clocks import TickingClock

E = EventType
T0 = 1_700_000_000.0


def site(fn: Callable[..., Any], text: str, nth: int = 1) -> str:
    """`FILE:LINE` (FILE the base name of `fn`'s module) of the nth source line of `fn`
    that contains `text`: the call site the engine records."""
    lines, start = inspect.getsourcelines(fn)
    hits = [start + i for i, line in enumerate(lines) if text in line]
    assert len(hits) >= nth, f"{text!r} not found in {fn.__name__}"
    file = os.path.basename(inspect.getsourcefile(fn) or "")
    return f"{file}:{hits[nth - 1]}"


class Driver:
    """One run of one workflow, driven event by event like the engine does."""

    def __init__(
        self,
        workflow: Any,
        *activities: Any,
        clock: TickingClock | None = None,
        history: list[Event] | None = None,
    ) -> None:
        self.registry = Registry()
        for item in (workflow, *activities):
            self.registry.add(item)
        self.defn = workflow.__waypost_workflow__
        self.clock = clock or TickingClock(T0)
        self.history: list[Event] = list(history or [])
        self.inst = WorkflowInstance(
            workflow=self.defn,
            activities=self.registry.activities(),
            codec=JsonCodec(),
            tenant="t1",
            run_id="run-1",
            clock=self.clock,
        )

    @classmethod
    def replayed(
        cls,
        workflow: Any,
        *activities: Any,
        history: list[Event],
        processed_seq: int | None = None,
        clock: TickingClock | None = None,
    ) -> Driver:
        """A fresh instance rebuilt from `history`; raises NondeterminismError."""
        history = stored(history)
        d = cls(workflow, *activities, clock=clock or TickingClock(T0 + 1_000_000), history=history)
        if processed_seq is None:
            processed_seq = d.last_fed_seq()
        d.inst.replay(history, processed_seq)
        d.new_commands = d.append(d.inst.take_commands())
        return d

    def last_fed_seq(self) -> int:
        """The last event that was not a command (what the engine records as processed)."""
        fed = [e.seq for e in self.history if e.data.get("cause") is None]
        return fed[-1] if fed else 0

    def append(self, events: list[NewEvent]) -> list[Event]:
        last = self.history[-1] if self.history else None
        sealed = seal(last.seq if last else 0, last.hash if last else "", events)
        self.history.extend(sealed)
        return sealed

    def feed(self, type_: EventType, **data: Any) -> list[Event]:
        """Append one event, let the code react, append and return its commands."""
        assert self.outcome is None, "the run has finished already"
        (ev,) = self.append([NewEvent(type_, data, self.clock())])
        self.inst.apply_new(ev)
        return self.append(self.inst.take_commands())

    # shorthands
    def start(self, input: Any = None) -> list[Event]:
        return self.feed(
            E.RUN_STARTED, workflow=self.defn.name, version=self.defn.version, input=input
        )

    def complete(self, step: str, result: Any = None) -> list[Event]:
        return self.feed(E.ACTIVITY_COMPLETED, step=step, attempt=1, result=result)

    def fail(self, step: str, message: str = "boom", attempt: int = 3) -> list[Event]:
        return self.feed(
            E.ACTIVITY_FAILED,
            step=step,
            attempt=attempt,
            error={"type": "RuntimeError", "module": "builtins", "message": message},
            retrying=False,
        )

    def fire(self, step: str) -> list[Event]:
        return self.feed(E.TIMER_FIRED, step=step, generation=1)

    def signal(self, name: str, payload: Any = None) -> list[Event]:
        return self.feed(E.SIGNAL_RECEIVED, name=name, payload=payload)

    def cancel(self, reason: str = "asked") -> list[Event]:
        return self.feed(E.CANCEL_REQUESTED, reason=reason)

    @property
    def outcome(self) -> Event | None:
        """The run's last event if it ended the run."""
        if self.history and self.history[-1].type in TERMINAL_EVENTS:
            return self.history[-1]
        return None

    def result(self) -> Any:
        out = self.outcome
        assert out is not None, f"the run has not finished: {self.history!r}"
        assert out.type == E.RUN_COMPLETED, out
        return out.data["result"]

    def error(self) -> dict[str, Any]:
        out = self.outcome
        assert out is not None and out.type == E.RUN_FAILED, out
        return out.data["error"]


def stored(events: list[Event]) -> list[Event]:
    """Events as the store hands them back: plain string types, data parsed from its text."""
    return [dataclasses.replace(e, type=str(e.type), data=json.loads(e.data_json)) for e in events]


def kinds(events: list[Event]) -> list[tuple[str, str | None]]:
    """(type, step) of each event: what replay must agree on."""
    return [(str(e.type), e.data.get("step")) for e in events]


@wp.activity
def echo(ctx: wp.ActivityContext, value: Any) -> Any:
    return value


@wp.activity
def charge(ctx: wp.ActivityContext, cents: int) -> str:
    return "receipt"


@wp.activity
def refund(ctx: wp.ActivityContext, cents: int) -> str:
    return "refunded"


@wp.activity
def cleanup(ctx: wp.ActivityContext, why: str) -> None:
    return None


@wp.activity
def add(ctx: wp.ActivityContext, a: int, b: int) -> int:
    return a + b


@wp.activity
def new_id(ctx: wp.ActivityContext) -> uuid.UUID:
    return uuid.uuid4()


@dataclasses.dataclass
class Parcel:
    sku: str
    weight: float


@wp.activity
def weigh(ctx: wp.ActivityContext, sku: str) -> Parcel:
    return Parcel(sku, 1.0)
