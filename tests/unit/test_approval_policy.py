"""Approval policies, tallies and credentials (pure)."""

from __future__ import annotations

import pytest
from hypothesis import given, strategies as st

import waypost as wp
from waypost.model import approvals as ap


def votes(**decisions: str) -> list[ap.Vote]:
    return [ap.Vote(who, decision) for who, decision in decisions.items()]


def test_without_veto_a_reject_ends_it_only_once_the_count_is_out_of_reach() -> None:
    board = wp.Quorum(2, group="board", veto=False)
    # ann rejected and left; bob approved; cid may still vote: two are reachable.
    assert ap.tally(board, votes(ann="reject", bob="approve"), remaining=1) == ap.PENDING
    assert ap.tally(board, votes(ann="reject", bob="approve"), remaining=0) == ap.REJECTED
    assert ap.tally(board, votes(ann="reject", bob="reject"), remaining=1) == ap.REJECTED
    # Nobody rejected: an approval waits (for its expiry, or for someone added).
    assert ap.tally(board, votes(ann="approve"), remaining=0) == ap.PENDING
    assert ap.tally(board, votes(ann="approve", bob="approve"), remaining=0) == ap.APPROVED
    assert ap.tally(board, votes(ann="reject")) == ap.PENDING  # unknown: only the count decides


@given(
    approvals=st.integers(0, 5),
    rejections=st.integers(0, 5),
    remaining=st.integers(0, 5),
    needed=st.integers(1, 5),
)
def test_a_tally_without_veto_rejects_exactly_when_the_count_is_out_of_reach(
    approvals: int, rejections: int, remaining: int, needed: int
) -> None:
    policy = wp.Quorum(needed, group="g", veto=False)
    cast = [ap.Vote(f"a{i}", ap.APPROVE) for i in range(approvals)]
    cast += [ap.Vote(f"r{i}", ap.REJECT) for i in range(rejections)]
    outcome = ap.tally(policy, cast, remaining=remaining)
    if approvals >= needed:
        assert outcome == ap.APPROVED
    elif rejections and approvals + remaining < needed:
        assert outcome == ap.REJECTED
    else:
        assert outcome == ap.PENDING


def test_who_may_decide_is_one_rule() -> None:
    policy = wp.Quorum(2, users=["Zed"], group="board")
    members = {"board": ["Ann", "bob", "eve", "zed"]}
    assert ap.eligible(policy, "EVE", members) == {"ann", "bob", "zed"}
    assert ap.eligible(policy.without("bob"), "nobody", members) == {"ann", "eve", "zed"}
    no_sod = wp.Quorum(2, group="board", segregation_of_duties=False)
    assert "eve" in ap.eligible(no_sod, "eve", members)
    # Nobody knows who started the run: segregation of duties fails closed (nobody may
    # decide), unless the policy allows an unknown starter in so many words.
    assert ap.eligible(policy, None, members) == set()
    assert ap.eligible(no_sod, None, members) == {"ann", "bob", "eve", "zed"}
    lenient = wp.Quorum(2, users=["Zed"], group="board", allow_unknown_starter=True)
    assert ap.eligible(lenient, None, members) == {"ann", "bob", "eve", "zed"}
    assert ap.eligible(lenient, "eve", members) == {"ann", "bob", "zed"}
    assert ap.Policy.from_json(lenient.to_json()) == lenient
    assert "allow_unknown_starter" not in policy.to_json()  # stored policies read alike
    for who in ("ann", "zed"):
        reason = ap.refusal(policy, who, started_by=None, member_of=lambda g: True, voted=[])
        assert reason == ap.UNKNOWN_STARTER
        assert ap.refusal(lenient, who, started_by=None, member_of=lambda g: True, voted=[]) is None


def test_escalating_never_needs_fewer_approvals() -> None:
    both = wp.AllOf(["ann", "bob"])
    up = both.escalated("directors")
    assert (up.kind, up.users, up.groups, up.needed) == ("all", ("ann", "bob"), ("directors",), 2)
    assert ap.tally(up, votes(dora="approve")) == ap.PENDING
    assert ap.tally(up, votes(dora="approve", ann="approve")) == ap.PENDING
    assert ap.tally(up, votes(dora="approve", ann="approve", bob="approve")) == ap.APPROVED
    assert ap.tally(up, votes(ann="approve", dora="reject")) == ap.REJECTED
    assert up.escalated("directors") == up  # once is enough
    assert ap.Policy.from_json(up.to_json()) == up
    assert wp.AnyOf(users=["ann"]).escalated("d").needed == 1
    quorum = wp.Quorum(3, group="m", veto=False).escalated("d")
    assert (quorum.needed, quorum.veto, quorum.groups) == (3, False, ("m", "d"))


def test_all_of_needs_each_named_user_not_a_number_of_votes() -> None:
    both = wp.AllOf(["ann", "bob"])
    assert ap.tally(both, votes(ann="approve", bob="approve")) == ap.APPROVED
    # bob approved, then his place went to dan: ann and dan are needed now.
    moved = both.without("bob").adding("dan")
    assert moved.users == ("ann", "dan")
    assert ap.tally(moved, votes(bob="approve", ann="approve")) == ap.PENDING
    assert ap.tally(moved, votes(bob="approve", ann="approve", dan="approve")) == ap.APPROVED


@pytest.mark.parametrize(
    "token",
    [
        "abc.def",
        "A-b_c.d-E_f",
    ],
)
def test_well_formed_tokens_split(token: str) -> None:
    assert ap.split_token(token) == tuple(token.split("."))


@pytest.mark.parametrize(
    "token",
    [
        "",
        "nodot",
        "a.b.c",
        ".b",
        "a.",
        "a\n.b",
        "a.b\x00",
        "\u2028.b",
        "a" * 65 + ".b",
        "a." + "b" * 129,
        "\uff41.b",  # full-width: not what waypost issues
        7,
    ],
)
def test_malformed_tokens_are_none(token: object) -> None:
    assert ap.split_token(token) is None


def test_issued_tokens_are_well_formed() -> None:
    issued = ap.issue_credential()
    assert ap.split_token(issued.token) == (issued.credential_id, issued.token.split(".")[1])
