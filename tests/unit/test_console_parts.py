"""The console's pure parts: cookie signing and CSRF tokens, the prefix bound of run
search, the hold-back after failed sign-ins, and a history told as steps and data."""

from __future__ import annotations

from waypost.model.events import Event
from waypost.model.users import lock_seconds
from waypost.server.console.history import data_after, next_words, story, waiting_words
from waypost.server.console.pages import local_path
from waypost.server.console.security import ConsoleSecret
from waypost.store.transactions.search import after_prefix


def test_a_cookie_is_accepted_only_as_signed_by_the_same_secret() -> None:
    secret, other = ConsoleSecret.random(), ConsoleSecret.random()
    cookie = secret.cookie_value("tok")
    assert secret.token_of(cookie) == "tok"
    assert other.token_of(cookie) is None
    token, _, mac = cookie.rpartition(".")
    for bad in (None, "", "tok", f"tok2.{mac}", f"{token}.{mac[:-1]}", "x" * 500 + "." + mac):
        assert secret.token_of(bad) is None


def test_csrf_tokens_are_per_session_and_compared_whole() -> None:
    secret = ConsoleSecret.random()
    token = secret.csrf_of("session-a")
    assert secret.csrf_matches("session-a", token)
    assert not secret.csrf_matches("session-b", token)
    assert not secret.csrf_matches("session-a", token[:-1])
    assert not secret.csrf_matches("session-a", None)
    assert ConsoleSecret.from_text(ConsoleSecret.random().key.hex()).key  # hex round trip


def test_the_bound_after_a_prefix_holds_every_id_that_starts_with_it() -> None:
    for prefix in ("run-", "a", "z\U0010ffff", "é", "x\U0010ffff\U0010ffff"):
        bound = after_prefix(prefix)
        for tail in ("", "a", "\U0010ffff", "\U0010ffff" * 3, "~"):
            assert prefix <= prefix + tail < bound, (prefix, tail)
    assert after_prefix("run-") == "run."


def test_failed_sign_ins_hold_a_user_back_longer_each_time_up_to_an_hour() -> None:
    assert [lock_seconds(n) for n in (0, 4, 5, 6, 7)] == [0, 0, 60, 120, 240]
    assert lock_seconds(100) == 3600


def test_only_paths_of_this_site_are_followed_after_sign_in() -> None:
    assert local_path("/runs/x?at=2") == "/runs/x?at=2"
    for bad in ("//evil", "/\\evil", "https://evil", "", None, "/a\nb", "/" + "a" * 600):
        assert local_path(bad) == "/runs"


def _ev(seq: int, kind: str, ts: float, **data: object) -> Event:
    return Event(seq=seq, type=kind, data=dict(data), ts=ts, hash="")


def test_a_history_told_as_steps_attempts_and_data_after_each_event() -> None:
    events = [
        _ev(1, "RunStarted", 0.0, input={"n": 1}),
        _ev(2, "ActivityScheduled", 1.0, step="1", activity="charge"),
        _ev(3, "ActivityFailed", 3.0, step="1", attempt=1, error={"type": "E"}, retrying=True),
        _ev(4, "ActivityCompleted", 4.5, step="1", attempt=2, result="ok"),
        _ev(5, "SignalReceived", 5.0, signal="go", payload=7),
        _ev(6, "RunTerminated", 6.0, reason="stop", by="olga"),
    ]
    told = story(events)
    assert told.steps["1"].state == "completed"
    assert told.steps["1"].attempt == 2
    assert [(a.outcome, a.duration) for a in told.attempts] == [("failed", 2.0), ("completed", 1.5)]
    assert told.rows[-1].actor == "olga"
    assert told.rows[-1].detail == "reason: stop"
    assert data_after(events, 1)["results"] == {}
    assert data_after(events, 4)["results"] == {"1": "ok"}
    assert data_after(events, 5)["signals"] == [{"signal": "go", "payload": 7}]
    assert waiting_words([{"kind": "signal", "name": "go"}, {"kind": "code"}]) == [
        "signal go",
        "a worker for its code",
    ]


def test_timers_and_the_next_action_are_told_in_words() -> None:
    waiting = [
        {
            "kind": "timer",
            "step": "1",
            "until": "2026-12-31T22:39:22.1+00:00",
            "site": "po v1 timeout",
        },
        {
            "kind": "timer",
            "step": "2.3",
            "until": "2026-12-04T22:39:22.1+00:00",
            "purpose": "approval(manager_approval) expiry",
            "site": "po v1 step manager_approval",
        },
        {"kind": "timer", "step": "4", "until": "2026-12-02T08:00:00+00:00", "site": "x.py:3"},
        {"kind": "timer", "step": "5", "purpose": "wait_signal(go) timeout", "until": "junk"},
    ]
    assert waiting_words(waiting) == [
        "the run's time limit at 2026-12-31 22:39 UTC (step 1)",
        "expiry of approval manager_approval at 2026-12-04 22:39 UTC (step 2.3)",
        "timer at 2026-12-02 08:00 UTC (step 4)",
        "timeout of the wait for signal go at junk (step 5)",
    ]
    told = "waiting for approval 'm' (step 2.2), until 2026-12-04 22:39:22 UTC (then it expires)"
    assert next_words({"detail": told, "at": "2026-12-04T22:39:22+00:00"}) == told
    assert next_words(
        {"detail": "activity 'a' is scheduled", "at": "2026-12-04T22:39:22+00:00"}
    ) == ("activity 'a' is scheduled (at 2026-12-04 22:39 UTC)")
    assert next_words(None) == ""
