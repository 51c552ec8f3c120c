"""The `Query` and `Update` requests (re-exported by `waypost.model.operations`)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from waypost.errors import InvalidRequest
from waypost.model.identity import Principal, Role, preview
from waypost.model.requests import READERS, Check, Cli, Http, Request, RunRequest, checked

MAX_ARGS = 20  # arguments of one query or update
MAX_UPDATE_WAIT = 3600.0  # seconds a caller may wait for an update's result


@dataclass(frozen=True)
class UpdateAnswer:
    """An update's id and what its handler returned."""

    update_id: str
    result: Any


def _check_args(args: Any) -> None:
    if not isinstance(args, tuple | list):
        raise InvalidRequest(f"args must be a list, not {preview(args)}", field="args")
    if len(args) > MAX_ARGS:
        raise InvalidRequest(
            f"at most {MAX_ARGS} arguments may be given, not {len(args)}", field="args"
        )


@dataclass(frozen=True)
class Query(RunRequest[Any]):
    """Ask a run's code what query `query` answers (its handler's value); read-only, never
    recorded. Answered from the run's history replayed, finished runs included."""

    roles = READERS
    name = "query"
    call = "query"
    http = Http("POST", "/v1/runs/{run_id:id}/queries/{name:id}")
    cli = Cli("runs query")
    query: str = checked(Check.ID, what="query name")
    args: tuple[Any, ...] = ()

    def checked(self, principal: Principal) -> Request[Any]:
        _check_args(self.args)
        return super().checked(principal)


@dataclass(frozen=True)
class Update(RunRequest[UpdateAnswer]):
    """Send update `update` to a run and wait (at most `timeout` seconds) for its result.

    Its validator runs first against the run's current state: a refusal is
    `UpdateRejected`, nothing recorded. Accepted, it is recorded (UpdateAccepted) and
    its handler's result too (UpdateCompleted). The same `update_id` again answers the
    first update's result; it never runs twice."""

    roles = frozenset({Role.STARTER, Role.OPERATOR})
    name = "update"
    call = "update"
    http = Http("POST", "/v1/runs/{run_id:id}/updates/{name:id}")
    cli = Cli("runs update")
    update: str = checked(Check.ID, what="update name")
    args: tuple[Any, ...] = ()
    update_id: str | None = checked(Check.OPTIONAL_ID, what="update_id", default=None)
    timeout: float = 60.0

    def checked(self, principal: Principal) -> Request[UpdateAnswer]:
        _check_args(self.args)
        t = self.timeout
        if isinstance(t, bool) or not isinstance(t, int | float) or not 0 < t <= MAX_UPDATE_WAIT:
            raise InvalidRequest(
                f"timeout must be seconds, more than 0 and at most {MAX_UPDATE_WAIT:g}, "
                f"not {preview(t)}",
                field="timeout",
            )
        return super().checked(principal)


UPDATE_OPERATIONS = (Query, Update)
