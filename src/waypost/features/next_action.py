"""What happens next to a run, in words and data, from what its rows already hold.

`next_action` reads the run's snapshot (status, error, `waiting_for`, which
names each open activity, timer, signal, approval, condition and child run, and the
timers that bound them), the run's tasks (is an attempt running, when is a
retry due, is the workflow code about to run) and its pending approvals (who
may decide, until when). It never replays the history, so reading a run or a
page of runs stays a few indexed reads.

The answer is one thing, the most telling: something running now, then
something due now, then the earliest thing due at a known time, then what
waits on the outside world with no time limit. `others` counts the rest
(`waiting_for` lists everything).
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

from waypost.model.approvals import Policy
from waypost.model.status import RunStatus
from waypost.store.base import ApprovalRecord, RunOutlook, RunRecord, TaskState

MAX_DETAIL_NAMES = 5
MAX_REASON = 300

_RUNNING, _DUE, _TIMED, _WAITING = range(4)


def _iso(ts: float | None) -> str | None:
    return None if ts is None else datetime.fromtimestamp(ts, UTC).isoformat()


def _ts(iso: Any) -> float | None:
    if not isinstance(iso, str):
        return None
    try:
        return datetime.fromisoformat(iso).timestamp()
    except ValueError:
        return None


def _when(ts: float | None) -> str:
    """A time in plain words (UTC, to the second)."""
    if ts is None:
        return "an unknown time"
    return datetime.fromtimestamp(ts, UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def _short(text: str, limit: int = MAX_REASON) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _action(kind: str, detail: str, at: float | None = None, **data: Any) -> dict[str, Any]:
    return {"kind": kind, "detail": detail, "at": _iso(at), **data}


def next_action(
    run: RunRecord,
    waiting: Sequence[dict[str, Any]],
    outlook: RunOutlook | None,
    now: float,
) -> dict[str, Any] | None:
    """What happens next to `run` (None once it has ended).

    `waiting` is the run's `waiting_for` with what no running worker serves added
    (entries of kind "code"); `outlook` its tasks and pending approvals.
    """
    status = RunStatus(run.status)
    if status.finished:
        return None
    if status is RunStatus.SUSPENDED:
        reason = (run.error or {}).get("message") or next(
            (w.get("detail") for w in waiting if w.get("kind") == "operator"), None
        )
        because = f": {_short(str(reason))}" if reason else ""
        error = run.error or {}
        if error.get("bug"):  # a bug in the workflow's code: fix it, then resume
            where = f" at {error['site']}" if error.get("site") else ""
            because = f": {error.get('type')}{where}{because}"
        return _action(
            "suspended",
            f"suspended until an operator acts{because} "
            "(fix the code, then `resume`; or `terminate`)",
        )
    if status is RunStatus.PAUSED:
        return _action("paused", "paused: nothing runs until an operator resumes the run")
    if status is RunStatus.ENQUEUED:
        return _action(
            "enqueued",
            "enqueued: it starts when its workflow queue's limits admit it (a slot frees, "
            "the rate allows)",
        )
    for w in waiting:
        if w.get("kind") == "code" and "activity" not in w:
            return _action("no_worker", str(w.get("detail")))

    outlook = outlook or RunOutlook()
    workflow_task = next((t for t in outlook.tasks if t.kind == "workflow"), None)
    if workflow_task is not None and workflow_task.state != "idle":
        timers = _quota(waiting, "max_pending_timers")
        if timers is not None and workflow_task.state == "ready":
            at = workflow_task.visible_at
            return _action("quota", str(timers.get("detail")), at=at, quota="max_pending_timers")
        return _workflow(workflow_task, now)

    candidates = _candidates(waiting, outlook, now)
    if not candidates:
        return _action("workflow", "nothing is scheduled: the run moves when an event arrives")
    candidates.sort(key=lambda c: (c[0], c[1] if c[1] is not None else 0.0))
    _, _, chosen = candidates[0]
    if len(candidates) > 1:
        chosen["others"] = len(candidates) - 1
    return chosen


def _quota(waiting: Sequence[dict[str, Any]], name: str) -> dict[str, Any] | None:
    """The entry of `waiting` saying the run waits for its tenant's quota `name`."""
    return next((w for w in waiting if w.get("kind") == "quota" and w.get("quota") == name), None)


def _workflow(task: TaskState, now: float) -> dict[str, Any]:
    if task.state == "leased":
        if task.visible_at is not None and task.visible_at < now:
            return _action(
                "workflow",
                "the engine running the workflow code stopped answering; another engine "
                "takes the run over",
            )
        return _action("workflow", "an engine is running the workflow code to decide what next")
    due = task.visible_at if task.visible_at is not None else now
    if due > now:
        return _action("workflow", f"the workflow code runs again at {_when(due)}", at=due)
    return _action(
        "workflow", "the workflow code runs next, as soon as an engine takes the run", at=due
    )


def _candidates(
    waiting: Sequence[dict[str, Any]], outlook: RunOutlook, now: float
) -> list[tuple[int, float | None, dict[str, Any]]]:
    tasks = {t.step: t for t in outlook.tasks if t.kind == "activity"}
    approvals = {a.approval_id: a for a in outlook.approvals}
    unserved = {
        str(w["activity"]): str(w.get("detail"))
        for w in waiting
        if w.get("kind") == "code" and "activity" in w
    }
    # Timers that bound another wait (a signal's or condition's timeout, an approval's
    # expiry) are told with that wait, not on their own.
    bounds: dict[str, dict[str, Any]] = {}
    timers: list[dict[str, Any]] = []
    for w in waiting:
        if w.get("kind") == "timer":
            purpose = w.get("purpose")
            if isinstance(purpose, str) and not purpose.startswith("escalation"):
                bounds[purpose] = w
            else:
                timers.append(w)
    used: set[str] = set()

    def bound(purpose: str) -> float | None:
        timer = bounds.get(purpose)
        if timer is None:
            return None
        used.add(purpose)
        return _ts(timer.get("until"))

    out: list[tuple[int, float | None, dict[str, Any]]] = []

    for w in waiting:
        kind = w.get("kind")
        if kind == "activity":
            limited = _quota(waiting, "max_concurrent_activities")
            out.append(_activity(w, tasks.get(str(w.get("step"))), unserved, now, limited))
        elif kind == "signal":
            name = str(w.get("name"))
            at = bound(f"wait_signal({name}) timeout")
            detail = f"waiting for signal {name!r}, sent from outside the run"
            if at is not None:
                detail += f", until {_when(at)} (then the wait times out)"
            out.append(
                (_TIMED if at else _WAITING, at, _action("signal", detail, at=at, signal=name))
            )
        elif kind == "approval":
            name = str(w.get("name"))
            at = bound(f"approval({name}) expiry")
            record = approvals.get(str(w.get("approval_id")))
            if record is not None and record.expires_at is not None:
                at = record.expires_at
            detail = _approval_detail(name, str(w.get("step")), record, at)
            data = {"approval_id": w.get("approval_id"), "step": w.get("step")}
            out.append((_TIMED if at else _WAITING, at, _action("approval", detail, at=at, **data)))
        elif kind == "child":
            detail = f"waiting for child run {w.get('run_id')!r} ({w.get('workflow')}) to end"
            data = {"run_id": w.get("run_id"), "step": w.get("step")}
            out.append((_WAITING, None, _action("child", detail, **data)))
        elif kind == "condition":
            at = bound("wait_condition timeout")
            detail = f"waiting for a condition in the workflow code ({_short(str(w.get('site')))})"
            if at is not None:
                detail += f", until {_when(at)} (then the wait times out)"
            out.append((_TIMED if at else _WAITING, at, _action("condition", detail, at=at)))
    timers.extend(w for purpose, w in bounds.items() if purpose not in used)
    out.extend(_timer(w) for w in timers)
    return out


def _timer(w: dict[str, Any]) -> tuple[int, float | None, dict[str, Any]]:
    at, step = _ts(w.get("until")), str(w.get("step"))
    purpose, site = w.get("purpose"), _short(str(w.get("site")), 200)
    if isinstance(purpose, str) and purpose.startswith("escalation"):
        detail = f"the approval's {purpose} happens at {_when(at)}"
    elif isinstance(purpose, str):
        detail = f"{purpose} ({site}) at {_when(at)}"
    elif site.endswith(" timeout"):  # a definition's whole-run timeout
        detail = f"the run's time limit ({site}) ends at {_when(at)}"
    else:
        detail = f"timer of step {step} ({site}) fires at {_when(at)}"
    return (_TIMED, at, _action("timer", detail, at=at, step=step))


def _activity(
    w: dict[str, Any],
    task: TaskState | None,
    unserved: dict[str, str],
    now: float,
    limited: dict[str, Any] | None = None,
) -> tuple[int, float | None, dict[str, Any]]:
    name, step = str(w.get("activity")), str(w.get("step"))
    data: dict[str, Any] = {"activity": name, "step": step}
    what = f"activity {name!r} (step {step})"
    if task is None:
        return (_DUE, None, _action("activity", f"{what} is scheduled", **data))
    if task.state == "leased":
        detail = f"{what} attempt {task.attempt} is running"
        if task.deadline is not None:
            detail += f" (it times out at {_when(task.deadline)})"
        return (
            _RUNNING,
            None,
            _action("activity", detail, attempt=task.attempt, deadline=_iso(task.deadline), **data),
        )
    due = task.visible_at if task.visible_at is not None else now
    nobody = unserved.get(name)
    if due > now and task.attempt >= 1:
        detail = (
            f"{what} attempt {task.attempt} failed; attempt {task.attempt + 1} is due at "
            f"{_when(due)}"
        )
        if nobody:
            detail += f", but {nobody}"
        return (_TIMED, due, _action("retry", detail, at=due, attempt=task.attempt + 1, **data))
    if nobody:
        return (_DUE, due, _action("no_worker", f"{what} is due, but {nobody}", at=due, **data))
    if limited is not None:
        detail = f"{what} is due, but {limited.get('detail')}"
        return (_DUE, due, _action("quota", detail, at=due, quota=limited.get("quota"), **data))
    detail = f"{what} attempt {task.attempt + 1} is due; a worker takes it next"
    return (_DUE, due, _action("activity", detail, at=due, attempt=task.attempt + 1, **data))


def _approval_detail(name: str, step: str, record: ApprovalRecord | None, at: float | None) -> str:
    detail = f"waiting for approval {name!r} (step {step})"
    if record is not None:
        try:
            policy = Policy.from_json(record.policy)
        except Exception:  # a policy this version cannot read still has a name and a step
            policy = None
        if policy is not None:
            who = [*policy.users, *(f"group {g}" for g in policy.groups)]
            shown = ", ".join(who[:MAX_DETAIL_NAMES])
            if len(who) > MAX_DETAIL_NAMES:
                shown += f", and {len(who) - MAX_DETAIL_NAMES} more"
            detail += f" by {policy.needed} of [{shown}]"
    if at is not None:
        detail += f", until {_when(at)} (then it expires)"
    return detail
