"""What landed commits tell the engine's observer.

Nearly everything worth counting about a run is an event its commit appends
(RunCompleted, RunSuspended, ActivityScheduled, ...), and every commit goes
through `Runner.commit`: so one look at each landed commit counts them all,
whoever wrote it (the decision loop, an operator command, a quota holding the
run). Commits do not carry the run's workflow, so the engine remembers it for
the runs it has loaded (`note`), a bounded map like the instance cache;
a run this process never loaded is counted under workflow "".
"""

from __future__ import annotations

from collections import OrderedDict
from typing import Any

from waypost.model.events import ActivityScheduled, EventType as _E, RunSuspended
from waypost.model.observe import NO_OBSERVER, Observer
from waypost.store.base import CommitResult, RunCommit
from waypost.store.effects import SettleActivity

from .attempts import Outcome

_ENDS = {
    _E.RUN_COMPLETED: "completed",
    _E.RUN_FAILED: "failed",
    _E.RUN_CANCELLED: "cancelled",
    _E.RUN_TERMINATED: "terminated",
}
_REMEMBERED = 10_000  # runs whose workflow is kept for labels


class CommitWatch:
    """Counts the events of landed commits for `observer`."""

    def __init__(self, observer: Observer) -> None:
        self.observer = observer
        self.idle = observer is NO_OBSERVER  # then nothing is looked at
        self._workflows: OrderedDict[tuple[str, str], str] = OrderedDict()

    def note(self, tenant: str, run_id: str, workflow: str) -> None:
        """Remember the workflow of a run this engine loaded or started."""
        if self.idle:
            return
        key = (tenant, run_id)
        self._workflows[key] = workflow
        self._workflows.move_to_end(key)
        if len(self._workflows) > _REMEMBERED:
            self._workflows.popitem(last=False)

    def landed(self, commit: RunCommit, res: CommitResult, seconds: float) -> None:
        """`commit` was tried; if it landed, count it and what it appended."""
        if self.idle or not res.ok:
            return
        obs = self.observer
        obs.committed(seconds, len(commit.events))
        settled = commit.effect(SettleActivity)
        if settled is not None and settled.lapsed:
            obs.lease_expired("activity")  # settled once, by the engine whose commit landed
        for ev in commit.events:
            kind = ev.type
            if kind == _E.ACTIVITY_SCHEDULED:
                obs.step_scheduled(str(ActivityScheduled.parse(ev).activity or ""))
            elif kind in _ENDS:
                workflow = self._workflows.pop((commit.tenant, commit.run_id), "")
                obs.run_ended(commit.tenant, workflow, _ENDS[kind])
                self._compensations(commit.tenant, workflow, ev.data)
            elif kind == _E.RUN_SUSPENDED:
                workflow = self._workflows.get((commit.tenant, commit.run_id), "")
                obs.run_suspended(commit.tenant, workflow)
                error = RunSuspended.parse(ev).error or {}
                if isinstance(error, dict) and error.get("type") == "QuotaExceeded":
                    obs.quota_refused(commit.tenant, str(error.get("quota", "")))

    def attempt(self, activity: str, outcome: Outcome) -> None:
        """An attempt of `activity` ended with `outcome` (and it was recorded)."""
        if self.idle:
            return
        if outcome.ok:
            how = "completed"
        elif outcome.lapses:
            how = "lost"  # its engine stopped renewing the lease
        elif (outcome.error or {}).get("type") == "ActivityTimeout":
            how = "timeout"
        else:
            how = "failed"
        self.observer.activity_attempt(activity, how, outcome.retrying and not outcome.ok)

    def _compensations(self, tenant: str, workflow: str, data: dict[str, Any]) -> None:
        # A cancelled run reports them in its `details`, a failed one in its error's.
        details = data.get("details")
        if details is None and isinstance(data.get("error"), dict):
            details = data["error"].get("details")
        if not isinstance(details, dict):
            return
        done, failed = details.get("compensated"), details.get("compensation_failed")
        if isinstance(done, list) and done:
            self.observer.compensated(tenant, workflow, "ok", len(done))
        if isinstance(failed, list) and failed:
            self.observer.compensated(tenant, workflow, "failed", len(failed))
