"""A PostgreSQL password in the database URL never appears in what waypost prints.

The worker's banner, `waypost db migrate` and the errors about URLs show the URL
with its password replaced by "***". The test server trusts local connections, so
the password in these URLs is never checked, only carried.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

import waypost as wp
from waypost.store import open_store, redact_url
from waypost.store.postgres import PostgresStore, parse_postgres_url

WAYPOST = Path(sys.executable).with_name("waypost")
PASSWORD = "hunter2-Xq9"
pytestmark = pytest.mark.timeout(120)


def with_password(url: str) -> str:
    scheme, _, rest = url.partition("://")
    user, _, host = rest.partition("@")
    return f"{scheme}://{user}:{PASSWORD}@{host}"


def waypost(*args: str, db: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(WAYPOST), *args, "--db", db],
        capture_output=True,
        text=True,
        timeout=60,
        env={k: v for k, v in os.environ.items() if k != "WAYPOST_DB"},
    )


def test_db_migrate_does_not_print_the_password(fresh_postgres: str) -> None:
    url = with_password(fresh_postgres)
    done = waypost("db", "migrate", db=url)
    assert done.returncode == 0, done.stderr
    assert "is up to date" in done.stdout
    assert "postgres:***@127.0.0.1" in done.stdout
    assert PASSWORD not in done.stdout + done.stderr


def test_the_worker_banner_does_not_print_the_password(fresh_postgres: str) -> None:
    url = with_password(fresh_postgres)
    proc = subprocess.Popen(
        [str(WAYPOST), "worker", "--db", url],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={k: v for k, v in os.environ.items() if k != "WAYPOST_DB"},
    )
    try:
        assert proc.stderr is not None
        banner = ""
        for _ in range(20):  # the banner, after any warning (e.g. autovacuum is off)
            banner += proc.stderr.readline()
            if "serving" in banner or not banner:
                break
        assert "serving" in banner, banner
    finally:
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=60)
    assert "postgres:***@" in banner
    assert PASSWORD not in banner + out + err


def test_errors_about_a_database_url_do_not_quote_the_password() -> None:
    for url in (
        f"mysql://app:{PASSWORD}@db.example.org/x",
        f"postgresql://app:{PASSWORD}@db.example.org/x?pool_size=many",
        f"postgresql://app:{PASSWORD}@db.example.org/x?pool_size=0",
        f"sqlite://app:{PASSWORD}@host/x.db",
    ):
        with pytest.raises(wp.ConfigurationError) as caught:
            open_store(url)
        assert PASSWORD not in str(caught.value), str(caught.value)
    with pytest.raises(wp.ConfigurationError) as caught:
        parse_postgres_url(f"mysql://app:{PASSWORD}@db.example.org/x")
    assert "mysql://app:***@db.example.org/x" in str(caught.value)


def test_a_failed_connection_does_not_quote_the_password() -> None:
    with pytest.raises(wp.StoreError) as caught:
        wp.Engine(f"postgresql://postgres:{PASSWORD}@127.0.0.1:1/nowhere?connect_timeout=2")
    assert PASSWORD not in str(caught.value)
    store = PostgresStore(f"postgresql://postgres:{PASSWORD}@127.0.0.1:1/nowhere")
    assert PASSWORD not in repr(store) and "***" in repr(store)


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        (f"postgresql://app:{PASSWORD}@db:5432/x", "postgresql://app:***@db:5432/x"),
        ("postgresql://app:p%40ss%3Aw@db/x", "postgresql://app:***@db/x"),
        ("postgresql://app:p@ss@db/x", "postgresql://app:***@db/x"),
        (
            f"postgresql://db/x?sslmode=require&password={PASSWORD}&application_name=w",
            "postgresql://db/x?sslmode=require&password=***&application_name=w",
        ),
        (f"postgres://u:{PASSWORD}@h1:5432,h2:5433/x", "postgres://u:***@h1:5432,h2:5433/x"),
        ("postgresql://app@db/x", "postgresql://app@db/x"),
        ("sqlite:///var/lib/waypost.db?synchronous=normal", None),
        (f"postgresql://app:{PASSWORD}@[::1/x", "postgresql://***"),
    ],
)
def test_redact_url(url: str, shown: str | None) -> None:
    assert redact_url(url) == (url if shown is None else shown)
