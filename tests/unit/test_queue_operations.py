"""The named queues' operations: wired like every other operation, and checked at the door."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.helpers.doors import door_serving
from waypost.errors import InvalidRequest
from waypost.model import operations_queues as oq
from waypost.model.identity import Principal, Role


def test_every_queue_operation_has_a_handler(tmp_path: Path) -> None:
    door_serving(oq, oq.QUEUE_OPERATIONS, tmp_path)
    assert oq.ConfigureQueue.roles == frozenset({Role.OPERATOR})


@pytest.mark.parametrize(
    ("fields", "field"),
    [
        ({"queue": "q", "concurrency": 0}, "concurrency"),
        ({"queue": "q", "key_concurrency": -1}, "key_concurrency"),
        ({"queue": "q", "rate": (1, 0)}, "rate"),
        ({"queue": "q", "rate": (1, 10**400)}, "rate"),
        ({"queue": "q"}, "queue"),
        ({"queue": "", "concurrency": 1}, "queue"),
    ],
    ids=["concurrency", "key_concurrency", "rate", "huge period", "nothing", "name"],
)
def test_configure_queue_is_checked_with_the_field_named(
    fields: dict[str, object], field: str
) -> None:
    with pytest.raises(InvalidRequest) as refused:
        oq.ConfigureQueue(**fields).checked(Principal.anonymous())  # type: ignore[arg-type]
    assert refused.value.field == field


def test_a_limit_not_given_is_kept_and_none_removes_it() -> None:
    done = oq.ConfigureQueue(queue="q", concurrency=None, rate=[5, 2]).checked(
        Principal.anonymous()
    )
    assert isinstance(done, oq.ConfigureQueue)
    assert (done.concurrency, done.rate, done.key_concurrency) == (None, (5, 2.0), oq.KEEP)
