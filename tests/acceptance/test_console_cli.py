"""`waypost users` as real processes, and a real `waypost server` of two processes whose
console sessions work whichever process answers."""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

import httpx
import pytest

from tests.helpers.cli import waypost
from tests.helpers.servers import server

pytestmark = pytest.mark.timeout(180)


def users(
    tmp_path: Path, *args: str, stdin: str = "", db: str | None = None
) -> subprocess.CompletedProcess[str]:
    return waypost(tmp_path, *args, url=db, stdin=stdin)


def create_user(
    tmp_path: Path, name: str, roles: str, *more: str, stdin: str = "", db: str | None = None
) -> subprocess.CompletedProcess[str]:
    """`waypost users create` of `name` in tenant acme with `roles` (and `more` options)."""
    who = ("--tenant", "acme", "--name", name, "--roles", roles)
    return users(tmp_path, "users", "create", *who, *more, stdin=stdin, db=db)


def test_users_are_made_listed_and_disabled_without_a_password_in_argv(tmp_path: Path) -> None:
    assert users(tmp_path, "tenants", "create", "acme").returncode == 0
    made = create_user(
        tmp_path, "Rita", "operator,viewer", "--password-stdin", stdin="a long password\n"
    )
    assert made.returncode == 0, made.stderr
    assert "user rita in tenant acme (operator, viewer)" in made.stdout
    again = create_user(tmp_path, "rita", "viewer", "--password-stdin", stdin="another password\n")
    assert again.returncode == 1
    assert "exists in this tenant already" in again.stderr
    short = create_user(tmp_path, "sam", "viewer", "--password-stdin", stdin="short\n")
    assert short.returncode == 1
    assert "a password has 8 to 512 characters" in short.stderr
    as_arg = create_user(tmp_path, "sam", "viewer", *("--password", "in argv"))
    assert as_arg.returncode == 2  # there is no such option
    [rita] = json.loads(users(tmp_path, "users", "list", "--tenant", "acme", "--json").stdout)
    assert rita["name"] == "rita" and rita["roles"] == ["operator", "viewer"]
    assert "password" not in rita and "password_hash" not in rita  # only when it changed
    assert "argon2" not in json.dumps(rita) and "$" not in json.dumps(rita)
    assert users(tmp_path, "users", "disable", "rita", "--tenant", "acme").returncode == 0
    listed = users(tmp_path, "users", "list", "--tenant", "acme").stdout
    assert listed.splitlines()[1].split()[:2] == ["rita", "disabled"]


def test_a_session_works_on_every_process_of_a_server(tmp_path: Path) -> None:
    db = f"sqlite:///{tmp_path / 'waypost.db'}"
    users(tmp_path, "tenants", "create", "acme", db=db)
    create_user(tmp_path, "rita", "viewer", "--password-stdin", stdin="a long password\n", db=db)
    with server(tmp_path, db, "--workers", "2") as base:
        with httpx.Client(base_url=base) as http:
            form = http.get("/sign-in")
            token = re.search(r'name="csrf" value="([^"]+)"', form.text)
            assert token is not None
            signed = http.post(
                "/sign-in",
                data={
                    "csrf": token.group(1),
                    "tenant": "acme",
                    "user": "rita",
                    "password": "a long password",
                },
            )
            assert signed.status_code == 303, signed.text
            cookie = http.cookies["waypost_session"]
        for _ in range(12):  # a new connection each time: either process may answer
            with httpx.Client(base_url=base, cookies={"waypost_session": cookie}) as fresh:
                page = fresh.get("/runs")
                assert page.status_code == 200
                assert "rita · acme" in page.text
