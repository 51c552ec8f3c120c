"""The named queues' operations: wired like every other operation, and checked at the door."""

from __future__ import annotations

from pathlib import Path

import pytest

from waypost.client.door import Door
from waypost.client.engine import AsyncEngine
from waypost.errors import InvalidRequest
from waypost.model import operations as ops, operations_queues as oq
from waypost.model.identity import Principal, Role


def test_every_queue_operation_has_a_handler(tmp_path: Path) -> None:
    engine = AsyncEngine(f"sqlite:///{tmp_path / 'never-opened.db'}")
    door = engine._door  # the test looks at the wiring itself
    assert isinstance(door, Door)
    assert [op.__name__ for op in oq.QUEUE_OPERATIONS if not door.serves(op)] == []
    declared = {
        obj
        for obj in vars(oq).values()
        if isinstance(obj, type) and issubclass(obj, ops.Request) and obj is not ops.Request
    }
    assert declared == set(oq.QUEUE_OPERATIONS)
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
