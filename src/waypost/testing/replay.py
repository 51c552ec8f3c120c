"""Replaying stored histories against workflow code: would this code suspend those runs?

`replay_history(code, events)` feeds a history to a fresh `WorkflowInstance` of
the given code, exactly as an engine would before continuing the run, but with no
store: nothing is written and no activity runs. It answers with a `ReplayResult`:
ok, or the first mismatch (the history event expected, what the code did instead,
the code's file:line). `replay_file` reads a history saved by
`waypost runs history RUN_ID > file` (one JSON event per line) or as a JSON list.

Decisions kept here:
- How far the code must match: an engine replays up to the snapshot's
  `processed_seq` and runs the code live on later events. A history file has no
  snapshot, so the last event the code is known to have handled is the newest
  `cause` of the commands it recorded; later events are fed live (a new command
  there is what the code would do next, not a mismatch).
- A finished run ended while its code handled the last event before the outcome:
  that event is fed live (the code may return there), then every recorded command
  must have been issued, and the code must end, as the history did.
- Bounds: a file over `MAX_FILE_BYTES`, a history over `MAX_EVENTS` events, a line
  that is not a JSON event, or events not numbered 1..n from `RunStarted` are an
  `InvalidHistory` error, never a replay of part of it.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass
from datetime import datetime
from enum import StrEnum
from typing import Any

from waypost.errors import InvalidHistory, NondeterminismError, WaypostError, WorkflowBug
from waypost.model.codec import Codec, JsonCodec
from waypost.model.definitions import Definition
from waypost.model.events import TERMINAL_EVENTS, Event, EventType, feeds_code
from waypost.model.identity import preview
from waypost.model.repairs import effective
from waypost.runtime.instance import WorkflowInstance
from waypost.runtime.interpreter import Interpreter
from waypost.runtime.registry import ActivityDefn, Registry, WorkflowDefn

MAX_FILE_BYTES = 64 * 1024 * 1024
MAX_EVENTS = 200_000
_E = EventType


class ReplayStatus(StrEnum):
    OK = "ok"
    MISMATCH = "mismatch"  # the code does not match the history: the run would be suspended
    ERROR = "error"  # replay failed otherwise (a payload the codec refuses, a bug)
    SKIPPED = "skipped"  # not replayed: a version this code lacks, a definition run


@dataclass(frozen=True)
class Mismatch:
    """The first place where the code and the history part."""

    seq: int | None  # the history event expected (or being handled)
    event_type: str | None
    step: str | None
    code_did: str  # what the code did instead ("ctx.run(refund)", "nothing", "returned")
    site: str  # the code's file:line
    message: str

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class ReplayResult:
    """What replaying one run's history against the code found."""

    run_id: str
    workflow: str
    version: str
    status: ReplayStatus
    events: int
    mismatch: Mismatch | None = None
    note: str = ""
    tenant: str = ""

    @property
    def ok(self) -> bool:
        return self.status is ReplayStatus.OK

    def line(self) -> str:
        """One line for a person: the run, then ok or what went wrong."""
        who = f"{self.tenant}/{self.run_id}" if self.tenant else self.run_id
        head = f"{who} ({self.workflow}@{self.version}, {self.events} events)"
        m = self.mismatch
        if self.status is ReplayStatus.MISMATCH and m is not None:
            expected = f"event {m.seq} {m.event_type}" + (f" step {m.step}" if m.step else "")
            did = m.code_did or "something else"
            at = f" at {m.site}" if m.site else ""
            return f"{head}: MISMATCH: expected {expected}; the code did {did}{at}"
        if self.status is ReplayStatus.OK:
            return f"{head}: ok" + (f" ({self.note})" if self.note else "")
        return f"{head}: {self.status.value}: {self.note}"

    def to_json(self) -> dict[str, Any]:
        return {
            "tenant": self.tenant,
            "run_id": self.run_id,
            "workflow": self.workflow,
            "version": self.version,
            "status": self.status.value,
            "events": self.events,
            "mismatch": self.mismatch.to_json() if self.mismatch is not None else None,
            "note": self.note,
        }


# == reading histories ===================================================================
def events_from_json(items: Sequence[Any]) -> list[Event]:
    """Events from their JSON form (`waypost runs history`: seq, type, time, data)."""
    if len(items) > MAX_EVENTS:
        raise InvalidHistory(f"the history has {len(items)} events, more than {MAX_EVENTS}")
    events = []
    for i, item in enumerate(items, 1):
        events.append(_event_from_json(item, i))
    check_history(events)
    return events


def _event_from_json(item: Any, n: int) -> Event:
    where = f"event #{n}"
    if not isinstance(item, dict):
        raise InvalidHistory(f"{where} is not a JSON object: {preview(item)}")
    seq, type_, data = item.get("seq"), item.get("type"), item.get("data")
    if not isinstance(seq, int) or isinstance(seq, bool):
        raise InvalidHistory(f"{where} has no whole-number 'seq'")
    if type_ not in set(EventType):
        raise InvalidHistory(f"{where} (seq {seq}) has an unknown type {preview(type_)}")
    if not isinstance(data, dict):
        raise InvalidHistory(f"{where} (seq {seq}) has no 'data' object")
    if item.get("undecodable"):
        raise InvalidHistory(
            f"event {seq} was stored damaged or edited (undecodable): it cannot be replayed"
        )
    ts = item.get("ts")
    if not isinstance(ts, int | float) or isinstance(ts, bool):
        text = item.get("time")
        try:
            ts = datetime.fromisoformat(text).timestamp() if isinstance(text, str) else 0.0
        except ValueError:
            raise InvalidHistory(f"{where} (seq {seq}) has a 'time' that is not ISO 8601") from None
    return Event(seq, str(type_), data, float(ts), str(item.get("hash") or ""))


def check_history(events: Sequence[Event]) -> None:
    """Refuse a history that is not numbered 1..n from a RunStarted event."""
    if not events:
        raise InvalidHistory("the history is empty")
    if len(events) > MAX_EVENTS:
        raise InvalidHistory(f"the history has {len(events)} events, more than {MAX_EVENTS}")
    for i, ev in enumerate(events, 1):
        if ev.seq != i:
            raise InvalidHistory(f"events are not numbered 1..n: #{i} has seq {ev.seq}")
        if ev.undecodable:
            raise InvalidHistory(f"event {ev.seq} is undecodable: it cannot be replayed")
    if events[0].type != _E.RUN_STARTED:
        raise InvalidHistory(f"the history starts with {events[0].type}, not RunStarted")
    started = events[0].data
    if not isinstance(started.get("workflow"), str) and "definition" not in started:
        raise InvalidHistory("the RunStarted event names no workflow")


def read_history_file(path: str | os.PathLike[str]) -> list[Event]:
    """The events of a history file: one JSON event per line, or one JSON list."""
    name = os.fspath(path)
    with open(name, "rb") as f:
        raw = f.read(MAX_FILE_BYTES + 1)
    if len(raw) > MAX_FILE_BYTES:
        raise InvalidHistory(f"{name} is larger than {MAX_FILE_BYTES} bytes")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise InvalidHistory(f"{name} is not UTF-8 text (byte {exc.start})") from None
    try:
        if text.lstrip().startswith("["):
            items = json.loads(text)
        else:
            items = []
            for number, line in enumerate(text.splitlines(), 1):
                if line.strip():
                    if len(items) >= MAX_EVENTS:
                        raise InvalidHistory(f"{name} has more than {MAX_EVENTS} events")
                    try:
                        items.append(json.loads(line))
                    except ValueError as exc:
                        raise InvalidHistory(
                            f"{name} line {number} is not a JSON event: {exc}"
                        ) from None
    except RecursionError:
        raise InvalidHistory(f"{name} nests JSON too deeply") from None
    except ValueError as exc:
        if isinstance(exc, InvalidHistory):
            raise
        raise InvalidHistory(f"{name} is not JSON: {exc}") from None
    if not isinstance(items, list):
        raise InvalidHistory(f"{name} holds no list of events")
    try:
        return events_from_json(items)
    except InvalidHistory as exc:
        raise InvalidHistory(f"{name}: {exc}") from None


# == replaying =============================================================================
def as_registry(code: Any) -> Registry:
    """A `Registry` of `code`: a Registry, one @workflow function, or many items."""
    if isinstance(code, Registry):
        return code
    registry = Registry()
    items: Iterable[Any] = code if isinstance(code, list | tuple | set) else (code,)
    for item in items:
        registry.add(item)
    return registry


class _ActivitiesSeenByName(dict[str, ActivityDefn]):
    """The registered activities, plus a stand-in for any other name the code calls.

    Replay never runs an activity: an activity the code calls but this process has
    not registered is compared with the history by name, like any other.
    """

    def get(self, name: str, default: Any = None) -> Any:
        found = super().get(name)
        if found is not None:
            return found
        return ActivityDefn(name=name, fn=_never_run, is_async=False)


def _never_run(*args: Any) -> None:  # pragma: no cover - replay never runs activities
    raise WaypostError("replay runs no activity")


def replay_history(
    code: Any,
    events: Sequence[Event] | Sequence[dict[str, Any]],
    *,
    processed_seq: int | None = None,
    run_id: str = "replay",
    tenant: str = "default",
    codec: Codec | None = None,
    definitions: Mapping[int, Definition] | None = None,
) -> ReplayResult:
    """Replay a run's history against `code` (a @workflow function, a list of
    workflows and activities, or a Registry) on the version the run is pinned to.

    `events` are `Event`s or their JSON form. `processed_seq` is the snapshot's (the
    last event the code had handled); without it, it is inferred from the history.
    Nothing is written, no activity runs. Raises `InvalidHistory` for a history that
    cannot be replayed at all.

    A definition run is replayed when `definitions` gives the versions of its
    definition its history names (by number: `parse_definition` of each version's
    body), interpreted under the limits its RunStarted recorded; without them it is
    skipped.
    """
    items: list[Any] = list(events)
    history: list[Event] = (
        items if all(isinstance(e, Event) for e in items) else events_from_json(items)
    )
    check_history(history)
    started = history[0].data
    workflow = str(started.get("workflow") or (started.get("definition") or {}).get("name", ""))
    version = str(started.get("version") or (started.get("definition") or {}).get("version", ""))

    def result(status: ReplayStatus, **kw: Any) -> ReplayResult:
        n = len(history)
        return ReplayResult(run_id, workflow, version, status, n, tenant=tenant, **kw)

    if "definition" in started:
        if definitions is None:
            return result(ReplayStatus.SKIPPED, note="a definition run (interpreted): not replayed")
        pinned = started["definition"]
        interpreter = Interpreter(definitions, int(pinned["version"]), pinned.get("limits"))
        interpreted = WorkflowDefn(
            name=workflow, version=version, fn=interpreter.run, tenant_defined=True
        )
        registry = as_registry(code)
        return _replay(interpreted, registry, history, processed_seq, run_id, tenant, codec, result)
    registry = as_registry(code)
    defn = registry.find_workflow(workflow, version)
    if defn is None:
        return result(ReplayStatus.SKIPPED, note="version not in this code")
    return _replay(defn, registry, history, processed_seq, run_id, tenant, codec, result)


def _replay(
    defn: WorkflowDefn,
    registry: Registry,
    history: list[Event],
    processed_seq: int | None,
    run_id: str,
    tenant: str,
    codec: Codec | None,
    result: Callable[..., ReplayResult],
) -> ReplayResult:
    # A run's end voided by a repair (retry, skip) is no end: the run went on.
    ending = next((ev for ev in effective(history) if ev.type in TERMINAL_EVENTS), None)
    fed = history if ending is None else [ev for ev in history if ev.seq < ending.seq]
    causes = [int(ev.data.get("cause") or 0) for ev in fed]
    handled = max(causes, default=0) if processed_seq is None else processed_seq
    handled = min(handled, fed[-1].seq)
    if ending is not None:
        # The code ended the run while handling the last event it was fed: that one
        # goes in live, where returning is what the code should do.
        last_fed = max((ev.seq for ev in fed if feeds_code(ev)), default=1)
        handled = min(handled, last_fed - 1)
    last_ts = history[-1].ts
    inst = WorkflowInstance(
        workflow=defn,
        activities=_ActivitiesSeenByName(registry.activities()),
        codec=codec or JsonCodec(),
        tenant=tenant,
        run_id=run_id,
        clock=lambda: last_ts,
    )
    try:
        inst.replay(fed, handled)
        if ending is not None:
            inst.check_all_issued()
            if not inst.finished:
                new = inst.take_commands()
                did = _describe_commands(new)
                return result(
                    ReplayStatus.MISMATCH,
                    mismatch=Mismatch(
                        ending.seq,
                        ending.type,
                        None,
                        did[0],
                        did[1],
                        f"the history ends the run ({ending.type}, event {ending.seq}) but "
                        f"the code did not end it: it {did[0]}"
                        + (f" at {did[1]}" if did[1] else ""),
                    ),
                )
    except NondeterminismError as err:
        return result(
            ReplayStatus.MISMATCH,
            mismatch=Mismatch(err.seq, err.event_type, err.step, err.code_did, err.site, str(err)),
        )
    except WorkflowBug as err:
        failed = (ending.data.get("error") or {}) if ending is not None else {}
        if (
            ending is not None
            and ending.type == EventType.RUN_FAILED
            and (failed.get("type") == err.error_type)
        ):
            # A run an earlier release failed for this exception: the code did what the
            # history records (today the same exception would suspend the run).
            return result(ReplayStatus.OK)
        return result(ReplayStatus.ERROR, note=f"replay failed: {err}")
    except Exception as err:
        return result(ReplayStatus.ERROR, note=f"replay failed: {type(err).__name__}: {err}")
    finally:
        inst.close()
    return result(ReplayStatus.OK)


def _describe_commands(new: Sequence[Any]) -> tuple[str, str]:
    """What a list of new commands is, in words, and where the first was issued."""
    for cmd in new:
        d = cmd.data
        what = d.get("activity") or d.get("kind") or ""
        if cmd.type == _E.ACTIVITY_SCHEDULED:
            return f"ctx.run({what}) (step {d.get('step')})", str(d.get("site") or "")
        return f"issued {cmd.type} {what} (step {d.get('step')})".replace("  ", " "), str(
            d.get("site") or ""
        )
    return "nothing (it still waits)", ""


def replay_file(
    path: str | os.PathLike[str],
    code: Any,
    *,
    processed_seq: int | None = None,
    run_id: str | None = None,
    tenant: str = "default",
    codec: Codec | None = None,
) -> ReplayResult:
    """Replay the history saved in the file `path` against `code` (see `replay_history`)."""
    events = read_history_file(path)
    return replay_history(
        code,
        events,
        processed_seq=processed_seq,
        run_id=run_id if run_id is not None else os.path.basename(os.fspath(path)),
        tenant=tenant,
        codec=codec,
    )
