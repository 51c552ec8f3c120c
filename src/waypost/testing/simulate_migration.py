"""The `definition_migration` scenario: runs of a workflow defined as data are moved
to the definition's version 2 while the migrating engine dies around the commit, two
engines migrate one run at once, a decision or a signal races the move, or the
database drops out.

`waypost.testing.simulate` runs it like every other scenario; it lives apart because
its driver and checks are its own. It imports the harness (`Sim`, the workflow defined
as data) from `simulate`, which imports this module only inside the functions that
need it, so neither module is half-initialised when the other imports it.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import random
import time
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import waypost as wp
from waypost.client.engine import AsyncEngine
from waypost.engine.faults import Crash
from waypost.errors import StoreError
from waypost.features.senders import Notification
from waypost.model.events import EventType
from waypost.model.records import MigrationReport
from waypost.model.status import RunStatus

from .faults import FaultRates
from .invariants import Violation, all_runs
from .sim import APPROVERS, DEFINITION_CODE, SHIPMENT, Sim, patiently, shipped

T = TypeVar("T")


def shipment(version: int) -> dict[str, Any]:
    """Definition `sim_shipment`: stock (undone by unstock), wait, dispatch.

    A run waits for an approval (of one approver, or of two), or for the signal
    `goods`, as its input's `waits_for` says. Version 2 inspects the goods
    between the wait and the dispatch, and says so in its result.
    """

    def activity(name: str, output: str, then: str, **more: Any) -> dict[str, Any]:
        return {
            "type": "activity",
            "activity": name,
            "input": {"n": "n"},
            "output": output,
            "timeout": 10,
            "retry": {"max_attempts": 100, "initial_interval": 0.02, "max_interval": 0.2},
            "next": then,
            **more,
        }

    after_wait = "inspect" if version == 2 else "dispatch"
    result = "{n: n, stock: stock.id, dispatched: dispatch.id"
    steps: dict[str, Any] = {
        "stock": activity(
            "sim.stock",
            "$.stock",
            "route",
            compensate={"activity": "sim.unstock", "input": {"stock_id": "stock.id"}},
        ),
        "route": {
            "type": "choice",
            "choices": [
                {"when": "waits_for == 'approval'", "next": "approve"},
                {"when": "waits_for == 'two approvals'", "next": "approve_two"},
            ],
            "default": "goods",
        },
        "approve": {
            "type": "approval",
            "approvers": {"groups": ["approvers"]},
            "expires_in": "P1D",
            "output": "$.approval",
            "next": after_wait,
        },
        "approve_two": {
            "type": "approval",
            "approvers": {"groups": ["approvers"], "quorum": 2},
            "output": "$.approval",
            "next": after_wait,
        },
        "goods": {
            "type": "wait",
            "signal": "goods",
            "timeout": "P1D",
            "output": "$.delivery",
            "next": after_wait,
        },
        "dispatch": activity("sim.dispatch", "$.dispatch", "done"),
        "done": {"type": "succeed", "output": result + "}"},
    }
    if version == 2:
        steps["inspect"] = activity("sim.inspect", "$.inspection", "dispatch")
        steps["done"]["output"] = result + ", inspected: inspection.id}"
    return {
        "name": SHIPMENT,
        "input": {
            "type": "object",
            "required": ["n", "waits_for"],
            "properties": {"n": {"type": "integer"}, "waits_for": {"type": "string"}},
        },
        "start": "stock",
        "steps": steps,
    }


MIGRATION_FAULTS = (
    "none",
    "left on version 1",
    "crash before",
    "crash after",
    "migrated twice at once",
    "decided at once",
    "signalled at once",
    "database outage",
    "one of two votes first",
)
MOVED_ALREADY = "on version 2 already"


async def _migrate(
    sim: Sim,
    run_id: str,
    engine: AsyncEngine | None = None,
    *,
    client: bool = True,
    patience: float = 5.0,
) -> MigrationReport:
    """Move `run_id` to version 2 as an operator would: again after an outage, and
    again for a while after a passing conflict, until the answer is yes or a reason
    that stands (or the conflict has lasted `patience` seconds)."""
    deadline = time.monotonic() + patience
    for _ in range(600):
        by = engine or sim.operator(client=client)
        try:
            report = await by.migrate(run_id, 2, reason="roll out version 2", by="ops")
        except StoreError:
            await asyncio.sleep(0.05)
            continue
        passing = any("try again" in r for r in report.reasons)
        if report.migrated or not passing or time.monotonic() > deadline:
            return report
        await asyncio.sleep(0.02)
    raise RuntimeError(f"migrating {run_id} met outages for too long")


async def _notification(sim: Sim, approval_id: str) -> Notification:
    for _ in range(600):
        notes = [n for n in sim.inbox.all() if n.approval_id == approval_id]
        if notes:
            return sim.random.choice(notes)
        await sim.replace_crashed()
        await asyncio.sleep(0.05)
    raise RuntimeError(f"no approver was told of approval {approval_id}")


async def _decide(sim: Sim, note: Notification) -> bool:
    """Approve with `note`'s credential; whether the decision counted."""
    for _ in range(600):
        try:
            await sim.operator().decide(
                note.approval_id, note.approve_token, note.approver, "approve"
            )
            return True
        except (wp.InvalidCredential, wp.DecisionRefused):
            return False
        except StoreError:
            await asyncio.sleep(0.05)
    raise RuntimeError(f"could not decide on approval {note.approval_id}")


async def _signal(sim: Sim, run_id: str) -> None:
    for _ in range(600):
        try:
            await sim.operator().signal(run_id, "goods", {"pallets": 1})
            return
        except wp.RunNotActive:
            return
        except StoreError:
            await asyncio.sleep(0.05)
    raise RuntimeError(f"could not signal {run_id}")


async def _move(sim: Sim, run_id: str, fault: str, rng: random.Random) -> bool | None:
    """Migrate one waiting run while `fault` strikes; whether it must have moved (None: either)."""
    await asyncio.sleep(rng.uniform(0, 0.3))  # the runs' migrations overlap, in varying order
    run = await patiently(functools.partial(sim.reader.get_run, "default", run_id))
    waits = {w.get("kind"): w for w in run.waiting_for} if run is not None else {}

    def bad(detail: str) -> None:
        sim.outcome.violations.append(Violation("migration", "default", run_id, detail))

    if fault == "left on version 1":
        return False
    if fault in ("crash before", "crash after"):
        where = fault.split()[1]
        doomed = await sim.engine(sim.rates, code=DEFINITION_CODE, dies_migrating=where)
        with contextlib.suppress(Crash):
            report = await _migrate(sim, run_id, doomed)
            bad(f"the engine lived through the crash {where} the commit: {report.reasons}")
        await sim.replace_crashed(sim.rates)
        if where == "before" and rng.random() < 0.5:
            return False
        # The operator saw the process die and tries again, on a fresh engine.
        report = await _migrate(sim, run_id)
        if where == "after" and not any(MOVED_ALREADY in r for r in report.reasons):
            bad(f"migrating again after a crash after the commit: {report}")
        return True
    if fault == "migrated twice at once":
        sim.note("one run migrated twice at once")
        reports = await asyncio.gather(_migrate(sim, run_id), _migrate(sim, run_id))
        moved = [r for r in reports if r.migrated]
        others = [r.reasons for r in reports if not r.migrated]
        if len(moved) != 1 or not all(any(MOVED_ALREADY in r for r in o) for o in others):
            bad(f"two migrations at once ended {[(r.migrated, r.reasons) for r in reports]}")
        return True
    if fault == "signalled at once":
        sim.note("a signal racing the migration")
        await asyncio.gather(_migrate(sim, run_id), _signal(sim, run_id))
        return None
    if fault == "decided at once":
        sim.note("a decision racing the migration")
        note = await _notification(sim, str(waits["approval"]["approval_id"]))
        report, counted = await asyncio.gather(_migrate(sim, run_id), _decide(sim, note))
        if report.migrated == counted:
            bad(f"migrated {report.migrated} and the racing decision counted {counted}")
        return report.migrated
    if fault == "one of two votes first":
        # The vote does not carry over to version 2 (the report notes so); the move
        # itself must not wait for anything.
        sim.note("one of two votes cast before the migration")
        note = await _notification(sim, str(waits["approval"]["approval_id"]))
        if not await _decide(sim, note):
            bad("the first of two votes did not count")
        report = await _migrate(sim, run_id)
        if not report.migrated:
            bad(f"refused to migrate a run one of two approvers voted on: {report.reasons}")
        return report.migrated
    if fault == "database outage":
        seconds = rng.uniform(0.2, 1.0)
        for _, injector in sim.engines:
            injector.begin_outage(seconds)
        await _migrate(sim, run_id, client=False)
        return True
    await _migrate(sim, run_id)
    return True


async def definition_migration(sim: Sim) -> None:
    """Definition version migration interrupted: runs of a definition wait for an
    approval or a signal, version 2 is published, and each run is migrated while an
    engine dies just before or after the migration's commit, two engines migrate it
    at once, an approver or a signal races the migration, or the database drops out.
    Every run completes once, on version 2 if (and only if) it was migrated, and the
    old version's approvals stay revoked."""
    sim.rates = FaultRates(outage=0.003, outage_seconds=0.2)
    await sim.client.add_to_group("approvers", APPROVERS)
    await sim.engine(sim.rates, code=DEFINITION_CODE)
    await sim.engine(sim.rates, code=DEFINITION_CODE)
    faults = list(MIGRATION_FAULTS)
    sim.random.shuffle(faults)
    plans: list[tuple[str, str, random.Random]] = []
    for i in range(max(sim.n_runs, len(faults))):  # every seed meets every fault
        fault = faults[i % len(faults)]
        run_id, order = sim.new_order(workflow=SHIPMENT)
        waits_for = {
            "decided at once": "approval",
            "signalled at once": "signal",
            "one of two votes first": "two approvals",
        }.get(fault)
        order["waits_for"] = waits_for or sim.random.choice(["approval", "two approvals", "signal"])
        plans.append((run_id, fault, random.Random(sim.random.getrandbits(64))))
    await _retrying(sim, lambda: sim.operator(client=False).publish(shipment(1), by="ops"))
    for run_id, order in sim.orders.items():
        await sim.start_one(run_id, order, version=1)  # version 2 may be there from before
    await sim.until_waiting(("approval", "signal"))
    await _retrying(sim, lambda: sim.operator(client=False).publish(shipment(2), by="ops"))

    moved = await asyncio.gather(*(_move(sim, *plan) for plan in plans))
    await _replay_revoked(sim)

    signalled: dict[str, float] = {}

    async def tick() -> None:
        """Approvers approve what is open and the goods arrive: every run can end."""
        for run in await patiently(lambda: all_runs(sim.reader)):
            if run.run_id not in sim.orders or RunStatus(run.status).finished:
                continue
            for w in run.waiting_for:
                if w.get("kind") == "approval":
                    notes = [n for n in sim.inbox.all() if n.approval_id == w["approval_id"]]
                    if notes:
                        await _decide(sim, sim.random.choice(notes))
                elif w.get("kind") == "signal" and time.monotonic() > signalled.get(run.run_id, 0):
                    signalled[run.run_id] = time.monotonic() + 1.0  # once a second at most
                    await _signal(sim, run.run_id)

    await sim.until_finished(tick=tick, rates=sim.rates, timeout=120)
    for (run_id, fault, _), must in zip(plans, moved, strict=True):
        await _check_shipment(sim, run_id, fault, must)


async def _retrying(sim: Sim, call: Callable[[], Awaitable[T]]) -> T:
    for _ in range(600):
        try:
            return await call()
        except (StoreError, Crash):
            await sim.replace_crashed(sim.rates)
            await asyncio.sleep(0.05)
    raise RuntimeError("the database stayed out")


async def _replay_revoked(sim: Sim) -> None:
    """Approvers click the links of approvals a migration revoked: none may count."""
    for run_id in sim.orders:
        history = await patiently(functools.partial(sim.reader.load_history, "default", run_id))
        for e in history:
            if e.type != EventType.RUN_MIGRATED:
                continue
            for approval_id in e.data.get("revoked_approvals", []):
                for note in [n for n in sim.inbox.all() if n.approval_id == approval_id]:
                    sim.note("revoked credential presented")
                    if await _decide(sim, note):
                        sim.outcome.violations.append(
                            Violation(
                                "migration",
                                "default",
                                run_id,
                                f"{note.approver} decided on revoked approval {approval_id}",
                            )
                        )


async def _check_shipment(sim: Sim, run_id: str, fault: str, must_move: bool | None) -> None:
    """The run completed once, on version 2 exactly when it was migrated (once)."""
    reader = sim.reader
    run = await patiently(functools.partial(reader.get_run, "default", run_id))
    history = await patiently(functools.partial(reader.load_history, "default", run_id))
    approvals = await patiently(
        functools.partial(reader.list_approvals, "default", None, run_id, 100)
    )

    def bad(detail: str) -> None:
        sim.outcome.violations.append(
            Violation("migration", "default", run_id, f"{fault}: {detail}")
        )

    if run is None:
        return  # finish() reports a missing run
    moves = [e for e in history if e.type == EventType.RUN_MIGRATED]
    if len(moves) > 1:
        bad(f"migrated {len(moves)} times (events {[e.seq for e in moves]})")
    if must_move is not None and must_move != bool(moves):
        bad("migrated, which it must not be" if moves else "not migrated, which it must be")
    version = 2 if moves else 1
    since = moves[0].seq if moves else len(history) + 1
    if run.version != str(version):
        bad(f"the runs row says version {run.version}, the history {version}")
    completions = [e.seq for e in history if e.type == EventType.RUN_COMPLETED]
    if len(completions) != 1:
        bad(f"{len(completions)} completions: {completions}")
    if run.status == RunStatus.COMPLETED and run.result != shipped(
        int(sim.orders[run_id]["n"]), version
    ):
        bad(f"result {run.result!r} is not version {version}'s")
    for e in history:
        if e.type == EventType.ACTIVITY_SCHEDULED:
            want = 2 if e.seq > since else 1
            if e.data.get("definition_version") != want:
                bad(
                    f"step {e.data.get('definition_step')} (event {e.seq}) ran version "
                    f"{e.data.get('definition_version')}, not {want}"
                )
    # The step the run left is withdrawn: its timers (the wait's timeout, the approval's
    # expiry) are cancelled, not left to fire.
    running: set[str] = set()  # the timers running when the run moved
    stops = {EventType.TIMER_CANCELLED, EventType.TIMER_FIRED}
    for e in history:
        if e.type == EventType.TIMER_STARTED and e.seq < since:
            running.add(e.data["step"])
        elif e.type in stops and (e.seq < since or e.type == EventType.TIMER_CANCELLED):
            running.discard(e.data["step"])
    if moves and running:
        bad(f"the timers {sorted(running)} of the step it left were not cancelled")
    pending = [a.approval_id for a in approvals if a.status == "pending"]
    if pending:
        bad(f"approvals {pending} are left pending")
