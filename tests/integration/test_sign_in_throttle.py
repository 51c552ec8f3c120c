"""Sign-in throttling, on both stores: attempts counted in the database before a password is
hashed (so concurrent guesses and several server processes count alike), by address
first (one address cannot hold a user back from everywhere), and hashing bounded (its
own threads; over the limit a sign-in is refused at once, unhashed).

Attempts go through the one door as the console's sign-in does; the busy answer is also
checked over HTTP. Hashes are counted by wrapping the real argon2 check.
"""

from __future__ import annotations

import asyncio
import re
import threading
from collections.abc import Awaitable, Callable

import httpx
import pytest

from waypost.client.engine import AsyncEngine
from waypost.errors import SignInBusy, SignInRefused
from waypost.features import users as users_feature
from waypost.model import operations as ops
from waypost.model.identity import Principal
from waypost.model.users import FAILURES_BEFORE_LOCK
from waypost.server.app import create_app

pytestmark = pytest.mark.timeout(180)

PASSWORD = "correct horse battery"
WRONG = "not the password at all"


class Hashes:
    """Counts the real password checks: how many, at most how many at once, on which threads."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.count = 0
        self.running = 0
        self.most_at_once = 0
        self.threads: set[str] = set()
        self._lock = threading.Lock()
        real = users_feature.password_matches

        def counted(stored: str, password: str) -> bool:
            with self._lock:
                self.count += 1
                self.running += 1
                self.most_at_once = max(self.most_at_once, self.running)
                self.threads.add(threading.current_thread().name)
            try:
                return real(stored, password)
            finally:
                with self._lock:
                    self.running -= 1

        monkeypatch.setattr(users_feature, "password_matches", counted)


async def _with_engines(
    db_url: str, check: Callable[..., Awaitable[None]], *, engines: int = 1
) -> None:
    """`check(engine, ...)` with `engines` engines on one database (as server processes)."""
    opened = [AsyncEngine(db_url) for _ in range(engines)]
    try:
        for engine in opened:
            await engine.open()
        first = opened[0]
        local = first.local("acme")
        await first.execute(ops.CreateTenant(tenant="acme"), local)
        for name in ("rita", "vera", "walt"):
            await first.create_user(name, ["operator"], PASSWORD, tenant="acme")
        await check(*opened)
    finally:
        for engine in opened:
            await engine.close()


async def _sign_in(engine: AsyncEngine, user: str, password: str, address: str) -> str:
    """'in', 'refused' or 'busy'."""
    request = ops.SignIn(tenant="acme", user=user, password=password, address=address)
    try:
        await engine.execute(request, Principal.anonymous())
    except SignInRefused:
        return "refused"
    except SignInBusy:
        return "busy"
    return "in"


# == counted before the hash =============================================================
def test_concurrent_guesses_from_one_address_are_counted_before_any_is_hashed(
    db_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    hashes = Hashes(monkeypatch)
    monkeypatch.setattr(users_feature, "HASHES_WAITING", 100)  # not busy: every one is tried

    async def check(engine: AsyncEngine) -> None:
        guesses = [_sign_in(engine, "rita", WRONG, "198.51.100.1") for _ in range(60)]
        outcomes = await asyncio.gather(*guesses)
        assert outcomes == ["refused"] * 60
        # Only the attempts counted before the user was held back at that address got to a hash.
        assert hashes.count == FAILURES_BEFORE_LOCK
        assert await _sign_in(engine, "rita", PASSWORD, "198.51.100.1") == "refused"  # held
        # ... from that address only: from another, the right password still signs in.
        assert await _sign_in(engine, "rita", PASSWORD, "203.0.113.5") == "in"
        assert hashes.count == FAILURES_BEFORE_LOCK + 1
        assert all(name.startswith("waypost-password") for name in hashes.threads)

    asyncio.run(_with_engines(db_url, check))


def test_server_processes_share_the_counts(db_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(users_feature, "ADDRESS_FAILURES", 4)

    async def check(one: AsyncEngine, two: AsyncEngine) -> None:
        address = "198.51.100.2"
        assert await _sign_in(one, "rita", WRONG, address) == "refused"
        assert await _sign_in(two, "vera", WRONG, address) == "refused"
        assert await _sign_in(one, "rita", WRONG, address) == "refused"
        assert await _sign_in(two, "vera", WRONG, address) == "refused"
        # Four failures from the address across the two: both refuse it now, unhashed.
        assert await _sign_in(one, "walt", PASSWORD, address) == "refused"
        assert await _sign_in(two, "walt", PASSWORD, address) == "refused"
        assert await _sign_in(two, "walt", PASSWORD, "198.51.100.3") == "in"

    asyncio.run(_with_engines(db_url, check, engines=2))


def test_concurrent_guesses_through_two_processes_are_counted_once(
    db_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    hashes = Hashes(monkeypatch)
    monkeypatch.setattr(users_feature, "HASHES_WAITING", 100)

    async def check(one: AsyncEngine, two: AsyncEngine) -> None:
        guesses = [_sign_in(engine, "rita", WRONG, "198.51.100.4") for engine in (one, two) * 15]
        assert set(await asyncio.gather(*guesses)) == {"refused"}
        assert hashes.count == FAILURES_BEFORE_LOCK

    asyncio.run(_with_engines(db_url, check, engines=2))


def test_a_right_password_clears_the_failures_it_followed(db_url: str) -> None:
    async def check(engine: AsyncEngine) -> None:
        address = "198.51.100.5"
        for _ in range(FAILURES_BEFORE_LOCK - 1):
            assert await _sign_in(engine, "rita", WRONG, address) == "refused"
        assert await _sign_in(engine, "rita", PASSWORD, address) == "in"
        for _ in range(FAILURES_BEFORE_LOCK - 1):  # a new run of failures starts from none
            assert await _sign_in(engine, "rita", WRONG, address) == "refused"
        assert await _sign_in(engine, "rita", PASSWORD, address) == "in"

    asyncio.run(_with_engines(db_url, check))


def test_a_user_is_held_back_everywhere_only_by_failures_from_many_addresses(
    db_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(users_feature, "ACCOUNT_FAILURES", 8)

    async def check(engine: AsyncEngine) -> None:
        # One address's failures reach its own hold, not the user's everywhere.
        for _ in range(FAILURES_BEFORE_LOCK):
            assert await _sign_in(engine, "rita", WRONG, "198.51.100.6") == "refused"
        assert await _sign_in(engine, "rita", PASSWORD, "198.51.100.7") == "in"
        # Failures from several addresses past the user's limit hold it back everywhere.
        for n in range(8):
            assert await _sign_in(engine, "vera", WRONG, f"203.0.113.{10 + n}") == "refused"
        assert await _sign_in(engine, "vera", PASSWORD, "203.0.113.99") == "refused"
        assert await _sign_in(engine, "walt", PASSWORD, "203.0.113.99") == "in"

    asyncio.run(_with_engines(db_url, check))


def test_an_ipv6_hosts_addresses_count_as_one(db_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(users_feature, "ADDRESS_FAILURES", 3)

    async def check(engine: AsyncEngine) -> None:
        for n, user in enumerate(("rita", "vera", "nobody")):
            assert await _sign_in(engine, user, WRONG, f"2001:db8:1:2::{n + 1:x}") == "refused"
        assert await _sign_in(engine, "walt", PASSWORD, "2001:db8:1:2:ffff::9") == "refused"
        assert await _sign_in(engine, "walt", PASSWORD, "2001:db8:1:3::1") == "in"

    asyncio.run(_with_engines(db_url, check))


def test_throttled_addresses() -> None:
    throttled = users_feature.throttled_address
    assert throttled("198.51.100.1") == "198.51.100.1"
    assert throttled("::ffff:198.51.100.1") == "198.51.100.1"
    assert throttled("2001:db8:1:2:3:4:5:6") == "2001:db8:1:2::/64"
    assert throttled("-") == "-"


# == unknown users and the hashing bound ===================================================
def test_unknown_users_cost_at_most_the_address_limit_of_hashes(
    db_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    hashes = Hashes(monkeypatch)
    monkeypatch.setattr(users_feature, "HASHES_WAITING", 200)

    async def check(engine: AsyncEngine) -> None:
        names = [f"nobody{n}" for n in range(100)]
        outcomes = await asyncio.gather(
            *(_sign_in(engine, name, WRONG, "198.51.100.8") for name in names)
        )
        assert set(outcomes) == {"refused"}
        assert hashes.count == users_feature.ADDRESS_FAILURES  # not 100

    asyncio.run(_with_engines(db_url, check))


def test_hashing_is_bounded_and_sign_ins_over_the_bound_are_refused_unhashed(
    db_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    hashes = Hashes(monkeypatch)

    async def check(engine: AsyncEngine) -> None:
        # Many addresses, so that no throttle holds them back: only the bound does.
        outcomes = await asyncio.gather(
            *(_sign_in(engine, "rita", WRONG, f"203.0.113.{n}") for n in range(40))
        )
        tried = users_feature.HASHERS + users_feature.HASHES_WAITING
        assert outcomes.count("busy") == 40 - tried
        assert outcomes.count("refused") == tried
        assert hashes.count == tried
        assert hashes.most_at_once <= users_feature.HASHERS
        # Busy ones were not counted: from their addresses the right password signs in.
        assert await _sign_in(engine, "rita", PASSWORD, "203.0.113.39") == "in"

    asyncio.run(_with_engines(db_url, check))


def test_the_console_answers_a_busy_sign_in_503_with_retry_after(
    db_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(users_feature, "HASHERS", 1)
    monkeypatch.setattr(users_feature, "HASHES_WAITING", 0)
    csrf = re.compile(r'name="csrf" value="([^"]+)"')

    async def check(engine: AsyncEngine) -> None:
        transport = httpx.ASGITransport(app=create_app(engine), client=("198.51.100.9", 1))

        async def attempt() -> httpx.Response:
            async with httpx.AsyncClient(transport=transport, base_url="http://c.test") as http:
                page = await http.get("/sign-in")
                token = csrf.search(page.text)
                assert token is not None
                form = {"csrf": token.group(1), "tenant": "acme", "user": "rita"}
                return await http.post("/sign-in", data={**form, "password": WRONG})

        answers = await asyncio.gather(*(attempt() for _ in range(6)))
        statuses = sorted(a.status_code for a in answers)
        assert 401 in statuses and 503 in statuses, statuses
        busy = next(a for a in answers if a.status_code == 503)
        assert busy.headers["retry-after"] == "1"
        assert "try again in a moment" in busy.text

    asyncio.run(_with_engines(db_url, check))


def test_a_new_password_lets_a_held_user_in_again(db_url: str) -> None:
    async def check(engine: AsyncEngine) -> None:
        address = "198.51.100.10"
        for _ in range(FAILURES_BEFORE_LOCK):
            await _sign_in(engine, "rita", WRONG, address)
        assert await _sign_in(engine, "rita", PASSWORD, address) == "refused"
        await engine.set_password("rita", "another good password", tenant="acme")
        assert await _sign_in(engine, "rita", "another good password", address) == "in"

    asyncio.run(_with_engines(db_url, check))
