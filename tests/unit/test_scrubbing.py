"""Scrubbing finds a credential however a receiver echoes it: encoded (base64, base64url,
hex, URL), re-cased, spaced out, cut short, inside a longer encoded text."""

from __future__ import annotations

import base64
import urllib.parse

import pytest

from waypost.features.scrubbing import scrub

SECRET = "crm-tok-6f1d0a9b3c7e4d2a8f5b0c1e9d7a3b6f/Zq+Xy"
RAW = SECRET.encode()


def _spaced(text: str) -> str:
    return " ".join(text)


ECHOES = {
    "as sent": SECRET,
    "base64": base64.b64encode(RAW).decode(),
    "base64 without padding": base64.b64encode(RAW).decode().rstrip("="),
    "base64url": base64.urlsafe_b64encode(RAW).decode(),
    "hex": RAW.hex(),
    "HEX": RAW.hex().upper(),
    "URL-encoded": urllib.parse.quote(SECRET, safe=""),
    "URL-encoded, lower-case escapes": urllib.parse.quote(SECRET, safe="").lower(),
    "form-encoded": urllib.parse.quote_plus(SECRET),
    "upper case": SECRET.upper(),
    "spaced": _spaced(SECRET),
    "spaced upper case": _spaced(SECRET.upper()),
    "first part": SECRET[:14],
    "last part": SECRET[-16:],
    "middle part": SECRET[9:25],
    "part of the base64": base64.b64encode(RAW).decode()[8:24],
    "part of the hex": RAW.hex()[20:34],
    "basic credential, user of 1 byte": base64.b64encode(b"u:" + RAW).decode(),
    "basic credential, user of 2 bytes": base64.b64encode(b"us:" + RAW).decode(),
    "basic credential, user of 3 bytes": base64.b64encode(b"use:" + RAW).decode(),
    "JSON-escaped": SECRET.replace("/", "\\/"),
}


def _pieces(text: str, size: int = 12) -> list[str]:
    return [text[i : i + size] for i in range(len(text) - size + 1)]


@pytest.mark.parametrize("form", sorted(ECHOES))
def test_an_echo_of_the_secret_in_any_common_form_is_cut_out(form: str) -> None:
    echoed = ECHOES[form]
    text = f'{{"you_sent": "Bearer {echoed}", "ok": true}}'
    out = scrub(text, [SECRET])
    assert "[redacted]" in out, form
    assert out.startswith('{"you_sent": "Bearer ') and out.endswith('", "ok": true}')
    for piece in _pieces(echoed.replace(" ", "")):
        assert piece not in out.replace(" ", ""), (form, piece)


def test_the_encoded_forms_of_a_secret_are_all_found_in_one_text() -> None:
    text = " | ".join(ECHOES.values())
    out = scrub(text, [SECRET])
    parts = out.split(" | ")
    assert len(parts) == len(ECHOES)
    for form, part in zip(ECHOES, parts, strict=True):
        # What is left of an encoded echo is at most its padding and the characters of the
        # groups it shares with what surrounds the secret ("dXNlOmNy" is "use:cr").
        assert "[redacted]" in part, form
        assert len(part.replace("[redacted]", "")) <= 12, (form, part)


@pytest.mark.parametrize(
    "text",
    [
        "nothing to see here",
        "crm-tok is the prefix of every token",  # under 12 characters of it
        "6f1d0a9b3c7",  # 11 characters of it
        '{"id": "ord-7", "amount": 1299, "currency": "EUR"}',
        base64.b64encode(b"an unrelated value of some length").decode(),
    ],
)
def test_text_without_the_secret_is_left_as_it_is(text: str) -> None:
    assert scrub(text, [SECRET]) == text


def test_a_short_secret_is_matched_whole_as_written_and_in_any_ascii_case() -> None:
    assert scrub("key=abc123, again ABC123", ["abc123"]) == "key=[redacted], again [redacted]"
    assert scrub("abc 123 is spaced", ["abc123"]) == "abc 123 is spaced"  # too short to hunt
    assert scrub("x", ["", SECRET]) == "x"


def test_a_secret_of_eight_to_eleven_letters_and_digits_is_found_whole_in_any_form() -> None:
    secret = "s3cr3t-w0rd"  # ten letters and digits
    for echo in (secret.upper(), " ".join(secret), base64.b64encode(secret.encode()).decode()):
        assert scrub(f"got {echo}.", [secret]).rstrip("=.") == "got [redacted]", echo
    assert scrub("got s3cr3t.", [secret]) == "got s3cr3t."  # a part is not enough here


def test_several_secrets_and_non_ascii_text_around_them() -> None:
    other = "Zm9vYmFyYmF6cXV4LTEyMzQ1Njc4OTA"
    text = f"é {SECRET.upper()} ü {other.lower()} İ end"
    assert scrub(text, [SECRET, other]) == "é [redacted] ü [redacted] İ end"
