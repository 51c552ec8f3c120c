"""The store's reachability: said once when lost, once when back, and only a request
that began after the loss ends it."""

from __future__ import annotations

import logging
import time

import pytest

from waypost.store.reach import Reach


def _lines(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == "waypost.store"]


def test_a_request_that_began_before_the_loss_does_not_end_it(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.WARNING)
    reach = Reach("db")
    began = time.monotonic() - 1  # a request in flight as the server shuts down
    reach.lost("the connection is lost")
    reach.lost("connection refused")  # said once
    reach.back(began)  # it finished after another failed: proves nothing
    assert not reach.reachable
    assert not Reach.all_reachable()
    reach.back(time.monotonic())
    assert reach.reachable and Reach.all_reachable()
    lines = _lines(caplog)
    assert len(lines) == 2, lines
    assert "cannot be reached (the connection is lost)" in lines[0]
    assert "is reachable again after" in lines[1]


def test_a_read_does_not_end_a_loss_of_writes() -> None:
    reach = Reach("db")
    reach.lost("the server is a standby", writes_only=True)
    reach.back(time.monotonic(), wrote=False)
    assert not reach.reachable
    reach.back(time.monotonic())
    assert reach.reachable
