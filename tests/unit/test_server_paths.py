"""Encoded slashes in URL paths (`server/paths.py`): kept inside their segment for
routing, given back as `/` by the `id` convertor, never confused with a client's NUL."""

from __future__ import annotations

from waypost.server.paths import SLASH, IdConvertor, decoded_path


def test_a_path_without_encoded_slashes_is_left_to_the_server() -> None:
    assert decoded_path(b"/v1/runs/a/history") is None
    assert decoded_path(b"/v1/runs/caf%C3%A9") is None


def test_encoded_slashes_stay_in_their_segment() -> None:
    path = decoded_path(b"/v1/runs/orders%2F2026%2fo-%C3%A9/history")
    assert path == f"/v1/runs/orders{SLASH}2026{SLASH}o-\u00e9/history"
    assert path is not None and path.split("/")[3] == f"orders{SLASH}2026{SLASH}o-\u00e9"
    assert IdConvertor().convert(path.split("/")[3]) == "orders/2026/o-\u00e9"


def test_a_clients_nul_is_never_read_as_a_slash() -> None:
    assert decoded_path(b"/v1/runs/a%00b%2Fc") is None


def test_the_convertor_writes_one_segment() -> None:
    assert IdConvertor().to_string("a/b c") == "a%2Fb%20c"
