"""Where a PostgreSQL URL points, as the store's messages name it."""

from __future__ import annotations

import pytest

from waypost.store.urls import server_of


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        ("postgresql://u:secret@db.example:6432/app", "db.example:6432/app"),
        ("postgresql://u@DB/app", "db:5432/app"),
        ("postgresql:///app", "localhost:5432/app"),
        # A primary and its standbys: each host, with its port (the default where none).
        (
            "postgresql://u:secret@10.0.0.1:5433,10.0.0.2/app?target_session_attrs=read-write",
            "10.0.0.1:5433,10.0.0.2:5432/app",
        ),
        ("postgresql://u@[::1]:5433,[::2]/app", "[::1]:5433,[::2]:5432/app"),
    ],
)
def test_the_servers_of_a_url_are_named_without_its_password(url: str, shown: str) -> None:
    assert server_of(url) == shown
