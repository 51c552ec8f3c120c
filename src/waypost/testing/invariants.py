"""Invariants that must hold over a store after any scenario, however it failed.

`check_invariants(store)` reads every run of every tenant through the store
interface (so it works on both databases) and returns the violations it
finds; an empty list means the store is sound:

- each history is numbered 1..n without gaps and its hashes chain;
- the snapshot agrees with the history (last sequence number and hash), and a
  run never moved backwards: once a terminal event is recorded only audit facts
  follow, and the status says finished exactly when a terminal event exists;
- every accepted activity result belongs to the attempt that was current: each
  step is scheduled once, attempts are numbered 1, 2, … in order, at most one
  result is accepted per step, and nothing is accepted after it;
- each timer fired at most once per generation, and not before it was due;
- every run is finished or waits for something it names (a waiting reason, an
  open task, or a suspension with its cause): none is stuck without a reason;
- each approval credential was consumed at most once, each approver counted at
  most once per approval, and no decision counted after the approval closed;
- a definition run moves between versions only while unfinished, each
  RunMigrated leaves the version the run was on, the runs row names the
  version of the last one, and the approvals it revoked stay revoked: closed
  "revoked" in the store at once, in the history once the run has processed
  the move, and decided by nobody after it;
- each update id is accepted at most once per run, and each UpdateCompleted ends
  an accepted update (step "u<seq of its UpdateAccepted>", same id), once;
- a child run is started once per step, its end recorded at most once and after its
  start, and its RunStarted names the parent run and step whose ChildStarted started it.

Effects outside the database are checked with a `Ledger`: an idempotent sink
keyed by the step's idempotency key, which must record at most one effect per
key however often the activity body ran.
"""

from __future__ import annotations

import collections
import dataclasses
import threading
from collections.abc import Iterable, Mapping
from typing import Any

from waypost.model.chain import PLAIN, Chain
from waypost.model.events import AUDIT_EVENTS, TERMINAL_EVENTS, Event, EventType
from waypost.model.repairs import effective
from waypost.model.status import RunStatus
from waypost.store.base import RunRecord, Store

_E = EventType
_AUDIT = AUDIT_EVENTS


@dataclasses.dataclass(frozen=True)
class Violation:
    """One broken invariant: which, where, and what was seen."""

    invariant: str
    tenant: str
    run_id: str
    detail: str

    def __str__(self) -> str:
        return f"[{self.invariant}] {self.tenant}/{self.run_id}: {self.detail}"


class Ledger:
    """A downstream system that deduplicates by idempotency key, as a payment API would.

    `apply(key, effect)` records the effect the first time a key is seen and
    ignores it afterwards; `executions` counts every call, so a test can show
    that the body ran more often than the effect happened.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.effects: dict[str, Any] = {}
        self.applied: collections.Counter[str] = collections.Counter()
        self.executions: collections.Counter[str] = collections.Counter()

    def apply(self, key: str, effect: Any) -> Any:
        """Apply `effect` once per key; return the effect recorded for the key."""
        with self._lock:
            self.executions[key] += 1
            if key not in self.effects:
                self.effects[key] = effect
                self.applied[key] += 1
            return self.effects[key]

    def violations(self) -> list[Violation]:
        return [
            Violation("downstream-once", "", key, f"{n} effects for one idempotency key")
            for key, n in self.applied.items()
            if n > 1
        ]


async def all_runs(store: Store) -> list[RunRecord]:
    return await store.list_runs(tenant=None, limit=2**62)


async def check_invariants(store: Store) -> list[Violation]:
    """Every violation of the invariants above, over every run in `store`."""
    out: list[Violation] = []
    histories: dict[tuple[str, str], list[Event]] = {}
    for run in await all_runs(store):
        history = await store.load_history(run.tenant, run.run_id)
        histories[run.tenant, run.run_id] = history
        tasks = await store.run_tasks(run.tenant, run.run_id)
        approvals = None
        if any(e.type == _E.RUN_MIGRATED for e in history):
            records = await store.list_approvals(run.tenant, None, run.run_id, 2**31 - 1)
            approvals = {a.approval_id: a.status for a in records}
        out.extend(
            check_run(
                run, history, has_open_task=bool(tasks), approvals=approvals, chain=store.chain
            )
        )
    out.extend(check_child_links(histories))
    return out


def check_child_links(histories: Mapping[tuple[str, str], list[Event]]) -> list[Violation]:
    """Child runs and their parents agree: a child's RunStarted names a run (of its tenant)
    whose history started it as that run at that step, once."""
    out: list[Violation] = []
    for (tenant, run_id), history in histories.items():
        parent = history[0].data.get("parent") if history else None
        if not isinstance(parent, dict):
            continue
        theirs = histories.get((tenant, str(parent.get("run_id"))))
        if theirs is None or (theirs and "continued_from" in theirs[0].data):
            continue  # purged, or its generation that started the child has ended
        started = [
            e
            for e in theirs
            if e.type == _E.CHILD_STARTED and e.data.get("step") == parent.get("step")
        ]
        if len(started) != 1 or started[0].data.get("run_id") != run_id:
            out.append(
                Violation(
                    "child-link",
                    tenant,
                    run_id,
                    f"its parent {parent.get('run_id')!r} has {len(started)} ChildStarted "
                    f"at step {parent.get('step')!r} for this run",
                )
            )
    return out


def _check_children(run: RunRecord, history: Iterable[Event]) -> list[Violation]:
    """Each child is started once per step, and its end is recorded at most once, after
    its start."""
    out: list[Violation] = []
    history = list(history)
    # A later generation hears of the children an earlier one started.
    continued = bool(history) and "continued_from" in history[0].data
    started: set[str] = set()
    ended: set[str] = set()
    for ev in history:
        step = str(ev.data.get("step"))
        if ev.type == _E.CHILD_STARTED:
            if step in started:
                out.append(Violation("child-once", run.tenant, run.run_id, f"step {step} twice"))
            started.add(step)
        elif ev.type in (_E.CHILD_COMPLETED, _E.CHILD_FAILED):
            if (step not in started and not continued) or step in ended:
                out.append(
                    Violation(
                        "child-once",
                        run.tenant,
                        run.run_id,
                        f"{ev.type} (event {ev.seq}) for step {step}, "
                        f"{'ended already' if step in ended else 'never started'}",
                    )
                )
            ended.add(step)
    return out


def check_run(
    run: RunRecord,
    history: list[Event],
    *,
    has_open_task: bool,
    approvals: Mapping[str, str] | None = None,
    chain: Chain = PLAIN,
) -> list[Violation]:
    """The violations of one run, from its snapshot and history.

    `approvals` (approval id -> status in the store), when given, is checked too;
    `chain` is how the history was hashed.
    """
    out: list[Violation] = []

    def bad(invariant: str, detail: str) -> None:
        out.append(Violation(invariant, run.tenant, run.run_id, detail))

    for problem in chain.verify(history, run=(run.tenant, run.run_id)):
        bad("hash-chain", f"event {problem.seq}: {problem.problem}")
    if not history:
        bad("history", "the run has no events")
        return out
    last = history[-1]
    if run.last_seq != last.seq or run.last_hash != last.hash:
        bad(
            "snapshot",
            f"snapshot head ({run.last_seq}, {run.last_hash[:12]}) is not the history's last "
            f"event ({last.seq}, {last.hash[:12]})",
        )
    if history[0].type != _E.RUN_STARTED:
        bad("history", f"the first event is {history[0].type}, not RunStarted")

    history = effective(history)  # what a repair voided does not count
    terminal = [e for e in history if e.type in TERMINAL_EVENTS]
    status = RunStatus(run.status)
    if len(terminal) > 1:
        bad("monotonic", f"{len(terminal)} terminal events: {[e.seq for e in terminal]}")
    if terminal:
        end = terminal[0].seq
        after = [e for e in history if e.seq > end and e.type not in _AUDIT]
        if after:
            bad("monotonic", f"{after[0].type} (event {after[0].seq}) after the run ended")
        if not status.finished:
            bad("monotonic", f"status {status} although event {end} ended the run")
    elif status.finished and status is not RunStatus.TERMINATED:
        bad("monotonic", f"status {status} without a terminal event")

    out.extend(_check_activities(run, history))
    out.extend(_check_timers(run, history))
    out.extend(_check_approvals(run, history))
    out.extend(_check_migrations(run, history, approvals))
    out.extend(_check_children(run, history))
    out.extend(_check_updates(run, history))

    if not status.finished:
        if status is RunStatus.SUSPENDED:
            if not any(e.type == _E.RUN_SUSPENDED for e in history):
                bad("explained", "suspended without a RunSuspended event")
        elif not run.waiting_for and not has_open_task:
            bad("explained", f"status {status} with nothing to wait for and no open task")
    return out


def _check_activities(run: RunRecord, history: Iterable[Event]) -> list[Violation]:
    out: list[Violation] = []
    scheduled: dict[str, int] = {}
    next_attempt: dict[str, int] = {}
    done: dict[str, int] = {}

    def bad(detail: str) -> None:
        out.append(Violation("activity-attempts", run.tenant, run.run_id, detail))

    for e in history:
        step = str(e.data.get("step", ""))
        if e.type == _E.ACTIVITY_SCHEDULED:
            if step in scheduled:
                bad(f"step {step} scheduled twice (events {scheduled[step]} and {e.seq})")
            scheduled[step] = e.seq
            next_attempt[step] = 1
        elif e.type in (_E.ACTIVITY_COMPLETED, _E.ACTIVITY_FAILED):
            if step not in scheduled:
                bad(f"event {e.seq}: a result for step {step}, which was never scheduled")
                continue
            if step in done:
                bad(f"event {e.seq}: a second outcome for step {step} (first: event {done[step]})")
                continue
            attempt = int(e.data.get("attempt", -1))
            if attempt != next_attempt[step]:
                bad(
                    f"event {e.seq}: outcome of attempt {attempt} of step {step} accepted "
                    f"while attempt {next_attempt[step]} was current"
                )
            if e.type == _E.ACTIVITY_FAILED and e.data.get("retrying"):
                next_attempt[step] = attempt + 1
            else:
                done[step] = e.seq
        elif e.type == _E.RUN_RETRIED and step in scheduled:
            next_attempt[step] = int(e.data.get("attempt", -1))
        elif e.type == _E.STEP_SKIPPED and step in scheduled:
            done.setdefault(step, e.seq)
    return out


def _check_timers(run: RunRecord, history: Iterable[Event]) -> list[Violation]:
    out: list[Violation] = []
    due: dict[str, float] = {}
    fired: collections.Counter[tuple[str, Any]] = collections.Counter()
    for e in history:
        step = str(e.data.get("step", ""))
        if e.type == _E.TIMER_STARTED:
            due[step] = float(e.data["fire_at"])
        elif e.type == _E.TIMER_FIRED:
            key = (step, e.data.get("generation"))
            fired[key] += 1
            if fired[key] == 2:
                out.append(
                    Violation(
                        "timer-once",
                        run.tenant,
                        run.run_id,
                        f"timer {step} generation {key[1]} fired twice",
                    )
                )
            if step in due and e.ts + 1e-6 < due[step]:
                out.append(
                    Violation(
                        "timer-once",
                        run.tenant,
                        run.run_id,
                        f"timer {step} fired at {e.ts:.3f}, before it was due at {due[step]:.3f}",
                    )
                )
    return out


def _check_approvals(run: RunRecord, history: Iterable[Event]) -> list[Violation]:
    out: list[Violation] = []
    credentials: dict[str, int] = {}
    voters: set[tuple[str, str]] = set()
    closed: dict[str, int] = {}

    def bad(detail: str) -> None:
        out.append(Violation("approval-once", run.tenant, run.run_id, detail))

    for e in history:
        d = e.data
        approval = str(d.get("approval_id", ""))
        if e.type == _E.APPROVAL_DECIDED:
            if d.get("credential_id") is not None:  # None: decided signed in, no credential
                cred = str(d.get("credential_id"))
                if cred in credentials:
                    bad(f"credential {cred} counted twice (events {credentials[cred]} and {e.seq})")
                credentials[cred] = e.seq
            voter = (approval, str(d.get("principal")))
            if voter in voters:
                bad(f"{voter[1]} counted twice on approval {approval} (event {e.seq})")
            voters.add(voter)
            if approval in closed:
                bad(f"a decision (event {e.seq}) counted after {approval} closed")
            if d.get("outcome") != "pending":
                closed[approval] = e.seq
        elif e.type == _E.APPROVAL_CLOSED:
            closed.setdefault(approval, e.seq)
    return out


def _check_migrations(
    run: RunRecord, history: list[Event], approvals: Mapping[str, str] | None
) -> list[Violation]:
    out: list[Violation] = []

    def bad(detail: str) -> None:
        out.append(Violation("migration", run.tenant, run.run_id, detail))

    moves = [e for e in history if e.type == _E.RUN_MIGRATED]
    started = history[0].data.get("definition") if history[0].type == _E.RUN_STARTED else None
    if not isinstance(started, Mapping):
        for e in moves:
            bad(f"event {e.seq}: RunMigrated in a run of workflow code")
        return out
    ended = next((e.seq for e in history if e.type in TERMINAL_EVENTS), None)
    version = started.get("version")
    open_approvals: set[str] = set()
    revoked: dict[str, int] = {}  # approval id -> the RunMigrated that revoked it
    for e in history:
        approval = str(e.data.get("approval_id", ""))
        if e.type == _E.APPROVAL_REQUESTED:
            open_approvals.add(approval)
        elif e.type == _E.APPROVAL_CLOSED or (
            e.type == _E.APPROVAL_DECIDED and e.data.get("outcome") != "pending"
        ):
            open_approvals.discard(approval)
        if e.type != _E.RUN_MIGRATED:
            continue
        if ended is not None and e.seq > ended:
            bad(f"event {e.seq}: RunMigrated after the run ended (event {ended})")
        if e.data.get("from_version") != version:
            bad(
                f"event {e.seq}: RunMigrated from version {e.data.get('from_version')}, "
                f"but the run was on version {version}"
            )
        version = e.data.get("to_version")
        for approval_id in e.data.get("revoked_approvals") or []:
            if approval_id in open_approvals:
                revoked[approval_id] = e.seq
    if run.version != str(version):
        bad(f"the runs row says version {run.version}, the history {version}")

    for approval_id, moved in revoked.items():
        after = [e for e in history if e.seq > moved and e.data.get("approval_id") == approval_id]
        closed = [e for e in after if e.type == _E.APPROVAL_CLOSED]
        decided = [e.seq for e in after if e.type == _E.APPROVAL_DECIDED]
        if decided:
            bad(f"approval {approval_id}, revoked by event {moved}, decided by events {decided}")
        if closed and closed[0].data.get("status") != "revoked":
            bad(
                f"approval {approval_id}, revoked by event {moved}, closed "
                f"{closed[0].data.get('status')!r} (event {closed[0].seq})"
            )
        # The run closes it in its history when it processes the move.
        if not closed and run.processed_seq >= moved:
            bad(f"approval {approval_id}, revoked by event {moved}, was never closed")
        stored = approvals.get(approval_id) if approvals is not None else None
        if approvals is not None and stored != "revoked":
            bad(f"approval {approval_id}, revoked by event {moved}, is {stored} in the store")
    return out


def _check_updates(run: RunRecord, history: Iterable[Event]) -> list[Violation]:
    out: list[Violation] = []
    accepted: dict[str, str] = {}  # step -> update id
    ids: set[str] = set()
    ended: set[str] = set()
    for ev in history:
        if ev.type == _E.UPDATE_ACCEPTED:
            update_id = str(ev.data.get("update_id"))
            if update_id in ids:
                out.append(
                    Violation(
                        "update-once",
                        run.tenant,
                        run.run_id,
                        f"event {ev.seq}: update id {update_id!r} accepted again",
                    )
                )
            ids.add(update_id)
            accepted[f"u{ev.seq}"] = update_id
        elif ev.type == _E.UPDATE_COMPLETED:
            step = str(ev.data.get("step")).rpartition("/")[2]  # without the generation
            if accepted.get(step) != ev.data.get("update_id") or step in ended:
                out.append(
                    Violation(
                        "update-once",
                        run.tenant,
                        run.run_id,
                        f"event {ev.seq}: UpdateCompleted of step {step} ends no accepted "
                        "update of its id, or ends it again",
                    )
                )
            ended.add(step)
    return out
