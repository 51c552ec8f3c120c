"""Ids, identities and texts as the door checks them (pure)."""

from __future__ import annotations

import re

import pytest
from hypothesis import given, strategies as st

import waypost as wp
from waypost.model.identity import (
    MAX_ID,
    Principal,
    Role,
    check_id,
    check_identity,
    check_text,
    normal_identity,
    preview,
)


def test_ids_are_kept_exactly() -> None:
    assert check_id("Order-1/ü", "run_id") == "Order-1/ü"


@pytest.mark.parametrize(
    ("value", "problem"),
    [
        ("", "must not be empty"),
        ("x" * (MAX_ID + 1), "too long"),
        ("a\nb", "U+000A"),
        ("a\u2028b", "U+2028"),
        ("a\u202eb", "U+202E"),  # right-to-left override: reorders what a reader sees
        ("a\u200db", "U+200D"),
        (7, "must be a string"),
    ],
)
def test_bad_ids_are_refused_with_a_bounded_message(value: object, problem: str) -> None:
    with pytest.raises(wp.InvalidRequest, match=re.escape(problem)) as refused:
        check_id(value, "run_id")
    assert refused.value.field == "run_id"
    assert len(str(refused.value)) < 140


@pytest.mark.parametrize(
    "spelling",
    [
        "eve",
        "Eve",
        "EVE",
        "\uff45\uff56\uff45",
        "\u0435ve",
        "\u0415VE",
        "\U0001d41e\U0001d42f\U0001d41e",
    ],
)
def test_every_spelling_of_a_name_is_the_same_person(spelling: str) -> None:
    # lower, title and upper case, full-width, Cyrillic small and capital e, bold maths
    assert check_identity(spelling, "principal") == "eve"


def test_different_people_stay_different() -> None:
    names = ["ann", "anne", "bob", "müller", "muller", "李", "o'brien", "ann smith"]
    assert len({check_identity(n, "principal") for n in names}) == len(names)


@pytest.mark.parametrize("value", [" eve", "eve ", "e\tve", "e\u200bve", "", "x" * 201])
def test_bad_identities_are_refused(value: str) -> None:
    with pytest.raises(wp.InvalidRequest):
        check_identity(value, "principal")


@given(st.text(min_size=1, max_size=40))
def test_the_normal_form_is_stable(text: str) -> None:
    once = normal_identity(text)
    assert normal_identity(once) == once


def test_texts_allow_lines_and_refuse_controls() -> None:
    assert check_text("two\nlines\tand a tab", "comment", limit=100) == "two\nlines\tand a tab"
    assert check_text(None, "comment", limit=100) == ""
    with pytest.raises(wp.InvalidRequest, match="required"):
        check_text(" ", "reason", limit=100, required=True)
    with pytest.raises(wp.InvalidRequest, match=re.escape("U+0000")):
        check_text("nul\x00", "comment", limit=100)
    with pytest.raises(wp.InvalidRequest, match="at most 10"):
        check_text("x" * 11, "comment", limit=10)


def test_preview_quotes_a_short_prefix() -> None:
    assert preview("abc") == "'abc'"
    long = preview("y" * 10_000)
    assert long.startswith("'yyyy") and "10000 characters" in long and len(long) < 80
    assert len(preview(list(range(10_000)))) < 80


def test_roles() -> None:
    viewer = Principal("t", "v", frozenset({Role.VIEWER}))
    assert viewer.may({Role.VIEWER, Role.AUDITOR}) and not viewer.may({Role.STARTER})
    assert Principal("t", "a", frozenset({Role.ADMIN})).may({Role.STARTER})
    local = Principal.local_for("t", "me")
    assert local.local and all(local.may({r}) for r in Role)
    assert local.is_subject("ME") and not local.is_subject("you")


def test_a_credential_never_shows_in_a_requests_repr() -> None:
    from waypost.model import operations as ops

    request = ops.Decide(approval_id="a", token="abc.s3cret", approver="ann", decision="approve")
    assert "s3cret" not in repr(request) and "s3cret" not in str(request)
