"""What a run's end means for its parent and children (waypost.model.children)."""

from __future__ import annotations

import pytest

from waypost.model.children import child_closing, parent_told
from waypost.model.events import (
    CancelRequested,
    ChildCompleted,
    ChildFailed,
    RunCancelled,
    RunTerminated,
)
from waypost.model.status import RunStatus


def test_a_parent_is_told_the_result_or_the_error() -> None:
    done = parent_told("s", "c", "completed", {"x": 1}, None)
    assert done == ChildCompleted(step="s", run_id="c", status="completed", result={"x": 1})
    failed = parent_told("s", "c", "failed", None, {"type": "Boom", "message": "b"})
    assert isinstance(failed, ChildFailed) and failed.error == {"type": "Boom", "message": "b"}
    # An end without an error (an operator's terminate, say) names its status.
    ended = parent_told("s", "c", "terminated", None, None)
    assert isinstance(ended, ChildFailed)
    assert ended.error == {"type": "terminated", "message": "terminated"}


@pytest.mark.parametrize(
    ("close", "child", "event", "ends"),
    [
        ("cancel", "running", CancelRequested, None),
        ("cancel", "suspended", RunCancelled, RunStatus.CANCELLED),
        ("terminate", "waiting", RunTerminated, RunStatus.TERMINATED),
        ("terminate", "suspended", RunTerminated, RunStatus.TERMINATED),
    ],
)
def test_an_open_child_is_closed_as_its_policy_says(
    close: str, child: str, event: type, ends: RunStatus | None
) -> None:
    closing = child_closing("p", "failed", close, child)
    assert closing is not None
    assert isinstance(closing.event, event) and closing.ends is ends
    assert closing.event.by == {"parent_run_id": "p", "close": close}
    assert closing.event.reason == "its parent run 'p' ended (failed)"
    if ends is not None:
        assert closing.error is not None and closing.error["message"] == closing.event.reason


@pytest.mark.parametrize(("close", "child"), [("abandon", "running"), ("cancel", "completed")])
def test_an_abandoned_or_finished_child_is_left_alone(close: str, child: str) -> None:
    assert child_closing("p", "completed", close, child) is None
