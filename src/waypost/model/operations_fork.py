"""The `Fork` request (re-exported by `waypost.model.operations`)."""

from __future__ import annotations

from dataclasses import dataclass

from waypost.errors import InvalidRequest
from waypost.model.fork import Forked
from waypost.model.identity import Principal, Role
from waypost.model.numbers import whole_number
from waypost.model.requests import Check, Cli, Http, Request, RunRequest, checked

MAX_SEQ = 2**31 - 1  # an event number any store keeps as an integer


@dataclass(frozen=True)
class Fork(RunRequest[Forked]):
    """Start a new run from a run's history up to a step (`Forked`): the copied steps'
    results are reused, not executed again; the cut step and what follows run anew.

    `at_step` cuts before that step (a step id, or a definition step's name);
    `up_to_seq` after that event of the source; neither: after the last event that
    can be copied. `new_run_id` names the new run (one is made if None); the same id,
    source and cut again answer the same run (`created=False`)."""

    roles = frozenset({Role.OPERATOR})
    name = "fork"
    call = "fork"
    http = Http("POST", "/v1/runs/{run_id:id}/fork", status=201)
    cli = Cli("runs fork")
    reason: str = checked(Check.REASON, what="fork's reason")
    at_step: str | None = checked(Check.OPTIONAL_ID, what="step", default=None)
    up_to_seq: int | None = None
    new_run_id: str | None = checked(Check.OPTIONAL_ID, what="new run_id", default=None)

    def checked(self, principal: Principal) -> Request[Forked]:
        if self.at_step is not None and self.up_to_seq is not None:
            raise InvalidRequest("give a step or an event number to fork at, not both")
        if self.up_to_seq is not None:
            whole_number(self.up_to_seq, "seq", 1, MAX_SEQ)
        return super().checked(principal)
