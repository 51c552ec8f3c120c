"""Cutting credentials out of text that will be stored or logged: an `http` step's answer
(a receiver may echo a header back), a sender's error.

A receiver does not echo a secret only as it was sent. It may send it back base64- or
hex-encoded (a Basic credential, a debugging dump), URL-encoded, in upper case, spaced
out, or cut short by a truncated message. So each credential is looked for in several
forms — as written, base64 (and base64url, at each of the three byte alignments it can
have inside a longer encoded text), hex, URL-encoded — and each form is matched on the
text's *skeleton*: its letters and digits only, ASCII letters in lower case, so that
case, spacing and punctuation do not hide it. A form whose skeleton holds at least
`WINDOW` characters is found by any `WINDOW` consecutive characters of it (a piece of a
credential is as good as the whole to whoever reads it); a shorter one only whole. A
credential so short that its skeleton is under `SHORT` characters is matched as
written (ASCII case ignored), since its skeleton would match too much ordinary text.

Everything a match covers in the original text, from its first to its last character
(the spaces or punctuation between included), becomes "[redacted]".
"""

from __future__ import annotations

import base64
import string
import urllib.parse
from collections.abc import Iterable

REDACTED = "[redacted]"
WINDOW = 12  # characters of a credential's skeleton that count as a piece of it
SHORT = 8  # a skeleton shorter than this is not matched as a skeleton

_ASCII_LOWER = str.maketrans(string.ascii_uppercase, string.ascii_lowercase)


def forms(credential: str) -> list[str]:
    """The credential as it may be echoed: as written, base64 (three alignments; the
    base64url alphabet differs only in characters a skeleton leaves out), hex,
    URL-encoded."""
    raw = credential.encode("utf-8", "surrogatepass")
    out = [
        credential,
        base64.b64encode(raw).decode(),
        raw.hex(),
        urllib.parse.quote(credential, safe=""),
        urllib.parse.quote_plus(credential, safe=""),
    ]
    # Inside a longer encoded text (a Basic credential: base64 of "user:secret"), the
    # credential's bytes start at any offset modulo 3; only the groups of 3 bytes wholly
    # its own encode the same whatever surrounds them.
    for start in (0, 1, 2):
        whole = raw[start:]
        whole = whole[: len(whole) - len(whole) % 3]
        if whole:
            out.append(base64.b64encode(whole).decode())
    return out


def skeleton(text: str) -> tuple[str, list[int]]:
    """`text`'s letters and digits (ASCII letters in lower case), and where each is."""
    kept: list[str] = []
    where: list[int] = []
    for i, ch in enumerate(text):
        if ch.isalnum():
            kept.append(ch)
            where.append(i)
    return "".join(kept).translate(_ASCII_LOWER), where


def scrub(text: str, credentials: Iterable[str]) -> str:
    """`text` with every credential, in any of its `forms`, whole or a piece of at least
    `WINDOW` letters and digits, replaced by "[redacted]" (see the module's text)."""
    windows: set[str] = set()
    wholes: set[str] = set()
    literals: set[str] = set()
    for credential in credentials:
        if not credential:
            continue
        literals.add(credential)  # an exact copy, whatever its length, always goes
        for form in forms(credential):
            bones, _ = skeleton(form)
            if len(bones) >= WINDOW:
                windows.update(bones[i : i + WINDOW] for i in range(len(bones) - WINDOW + 1))
            elif len(bones) >= SHORT:
                wholes.add(bones)
            elif form:
                literals.add(form.translate(_ASCII_LOWER))
    if not (windows or wholes or literals):
        return text
    marked = [False] * len(text)
    lowered = text.translate(_ASCII_LOWER)
    for literal in literals:
        for probe, needle in ((text, literal), (lowered, literal.translate(_ASCII_LOWER))):
            start = probe.find(needle)
            while start != -1:
                marked[start : start + len(needle)] = [True] * len(needle)
                start = probe.find(needle, start + 1)
    if windows or wholes:
        bones, where = skeleton(text)
        for i in range(len(bones) - WINDOW + 1):
            if bones[i : i + WINDOW] in windows:
                marked[where[i] : where[i + WINDOW - 1] + 1] = [True] * (
                    where[i + WINDOW - 1] + 1 - where[i]
                )
        for whole in wholes:
            start = bones.find(whole)
            while start != -1:
                first, last = where[start], where[start + len(whole) - 1]
                marked[first : last + 1] = [True] * (last + 1 - first)
                start = bones.find(whole, start + 1)
    if not any(marked):
        return text
    out: list[str] = []
    for i, ch in enumerate(text):
        if not marked[i]:
            out.append(ch)
        elif i == 0 or not marked[i - 1]:
            out.append(REDACTED)
    return "".join(out)
