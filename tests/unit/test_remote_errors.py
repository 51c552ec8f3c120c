"""The HTTP client turns the server's error answers back into the embedded API's errors:
the same class, message and details as the error the server answered for."""

from __future__ import annotations

from typing import Any

import pytest

import waypost as wp
from waypost.client.remote import error_from
from waypost.model.definitions import DefinitionError, InputError
from waypost.model.definitions.format import Problem
from waypost.server.errors import answer, error_body

REFUSALS: list[wp.WaypostError] = [
    wp.InvalidState("run 'r1' is not paused (it is waiting)"),
    wp.RunNotActive("run 'r1' is completed"),
    wp.PermissionDenied("'sam' may not terminate in tenant 'acme'"),
    wp.RunNotFound("run 'r1' not found"),
    wp.RunIdConflict("run 'again' exists"),
    wp.InvalidRequest("run_id must not be empty", field="run_id"),
    wp.PayloadError("NaN is not JSON"),
    InputError("order", [Problem("amount", "-1 is less than the minimum of 0")]),
    DefinitionError([Problem("steps.pay", "unknown activity")]),
    wp.QuotaExceeded("max_payload_bytes", "the payload is over 1 MB"),
    wp.QuotaExceeded("start_rate", "too many starts", retry_after=2.5),
]


@pytest.mark.parametrize("refused", REFUSALS, ids=lambda r: type(r).__name__)
def test_an_error_comes_back_as_the_error_the_server_answered_for(
    refused: wp.WaypostError,
) -> None:
    status, body, _headers = answer(refused)
    back = error_from(status, body)
    assert type(back) is type(refused)
    assert str(back) == str(refused)
    for name in ("field", "problems", "quota", "retry_after", "name"):
        assert getattr(back, name, None) == getattr(refused, name, None), name


def test_the_apis_own_refusals_are_waypost_errors_that_say_what_was_wrong() -> None:
    problems = {"problems": [{"path": "reason", "message": "Field required"}]}
    missing = error_from(422, error_body("invalid_request", "not as expected", problems))
    assert isinstance(missing, wp.InvalidRequest)
    assert missing.field == "reason" and "reason: Field required" in str(missing)
    too_large = error_from(413, error_body("too_large", "the request body is over 1 bytes"))
    assert isinstance(too_large, wp.QuotaExceeded) and too_large.quota == "max_request_bytes"
    down = error_from(503, error_body("store_unavailable", "the database is not answering"))
    assert isinstance(down, wp.StoreError)


def test_a_write_the_database_refuses_is_a_422_not_worth_sending_again() -> None:
    """The database's own words (which may quote what it refused) stay in the log."""
    status, body, headers = answer(wp.StoreRejected('violates check constraint "no_x": (x, 1)'))
    assert (status, body["error"]["code"]) == (422, "store_rejected")
    assert "check constraint" not in body["error"]["message"]
    assert "Retry-After" not in headers
    back = error_from(status, body)
    assert isinstance(back, wp.StoreRejected) and isinstance(back, wp.StoreError)
    assert answer(wp.StoreError("connection refused"))[2] == {"Retry-After": "5"}


@pytest.mark.parametrize("body", [None, "text", {"error": "x"}, {"error": {"code": 7}}])
def test_an_answer_without_an_error_body_is_still_a_waypost_error(body: Any) -> None:
    assert isinstance(error_from(500, body), wp.WaypostError)
