"""Who is asking, and the text they send: principals, roles, ids and identities.

Everything an outsider supplies passes through these checks once, at the one
door (`waypost.client.door`), before the engine computes on it:

- an **id** (a run id, an approval id, a tenant, a signal or group name) is
  kept exactly as given, but must be a non-empty string of at most `MAX_ID`
  characters with no control, format, separator-of-lines or unassigned
  characters (they would break log lines, mail headers and URLs later);
- an **identity** (a person: an approver, who started a run, who did
  something) is reduced to one normal form, so that "Eve", "eve", "eve" in
  full-width letters and "eve" spelt with a Cyrillic "e" are the same person
  wherever identity matters (segregation of duties, one vote per approver,
  group membership): Unicode
  NFKC, case folding, then each non-ASCII character that Unicode's
  confusables data says looks like ASCII text is replaced by that text;
- a **text** (a reason, a comment) is bounded and may not hold control
  characters other than newlines and tabs.

Error messages quote at most a short prefix of the offending value.
"""

from __future__ import annotations

import functools
import unicodedata
from collections.abc import Iterable
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from waypost.errors import InvalidRequest

MAX_ID = 200
MAX_IDENTITY = 200
MAX_REASON = 2000
MAX_COMMENT = 4000
PREVIEW = 40

# Characters never allowed in ids and identities: control (Cc), format (Cf, such as
# zero-width joiners and bidirectional overrides), surrogates, private use and
# unassigned code points, and the line and paragraph separators.
_REFUSED_CATEGORIES = frozenset({"Cc", "Cf", "Cs", "Co", "Cn", "Zl", "Zp"})


class Role(StrEnum):
    """What a principal may do; `admin` may do everything in its tenant."""

    ADMIN = "admin"
    OPERATOR = "operator"
    STARTER = "starter"
    APPROVER = "approver"
    AUDITOR = "auditor"
    VIEWER = "viewer"


ALL_ROLES = frozenset(Role)


@dataclass(frozen=True)
class Principal:
    """The caller of an operation: a subject acting in one tenant with some roles.

    The embedded Python API and the command line act as a *local* principal:
    every role in the tenant they name, and they may act on behalf of any
    person (they name the approver who decides, who started a run); the
    operation's checks still apply. A principal built from a credential (an
    API key, a session) is not local: the persons it names must be itself.
    """

    tenant: str
    subject: str
    roles: frozenset[Role] = field(default_factory=frozenset)
    local: bool = False
    # False only for `Principal.anonymous()`: nobody signed in (a visitor of an approval
    # link); the door lets it send only the requests open to anyone (`open_to_anonymous`).
    authenticated: bool = True
    # How the caller proved who it is, as the audit records a decision it makes without an
    # approval link's credential: its API key, or a console session opened with a password
    # ("console-password") or a key ("console-key").
    auth: str = "api-key"
    # Which credential authenticated the caller, as the audit records what it does:
    # "key:<key id>" (an API key, or a console session opened with one), "user:<name>" (a
    # console user's password); "" where nothing of the tenant's did (local, a link's page).
    # Not part of who the caller is: two keys of one principal make equal principals.
    credential: str = field(default="", compare=False)

    def __post_init__(self) -> None:
        if not self.authenticated and (self.local or self.roles or self.tenant):
            raise InvalidRequest("an unauthenticated principal has no tenant, roles or locality")

    @classmethod
    def local_for(cls, tenant: str, subject: str = "local") -> Principal:
        """The principal of the embedded API and the CLI in `tenant`."""
        return cls(tenant, subject, ALL_ROLES, local=True)

    @classmethod
    def anonymous(cls) -> Principal:
        """Someone nobody authenticated: no tenant, no roles.

        The door lets it send only the requests open to anyone, where what it
        presents authenticates it (an approval link's token); every other
        request is refused with `PermissionDenied`.
        """
        return cls("", "anonymous", frozenset(), authenticated=False)

    def may(self, roles: Iterable[Role]) -> bool:
        """Whether this principal holds one of `roles` (or is an admin)."""
        if not self.authenticated:
            return False
        return Role.ADMIN in self.roles or any(r in self.roles for r in roles)

    def is_subject(self, identity: str) -> bool:
        """Whether `identity` names this principal (compared in their normal form)."""
        return normal_identity(identity) == normal_identity(self.subject)


def preview(value: Any, limit: int = PREVIEW) -> str:
    """A short, printable quotation of a value for an error message."""
    if isinstance(value, str):
        text = value
        if len(text) > limit:
            return f"{text[:limit]!r}... ({len(text)} characters)"
        return repr(text)
    text = repr(value)
    if len(text) > limit:
        return f"{text[:limit]}... (a {type(value).__name__})"
    return text


MAX_LOGGED = 500


_SHORT_ESCAPES = {"\\": "\\\\", "\n": "\\n", "\r": "\\r", "\t": "\\t"}


def printable(value: Any, limit: int = MAX_LOGGED) -> str:
    """`value` as one printable line, for a log line: nothing in it can start another.

    Every character `str.isprintable` refuses (control characters, line and
    paragraph separators, format characters such as bidirectional overrides,
    unassigned code points) is written as a Python escape, and so is the
    backslash, so the escaped text reads back unambiguously. Longer values are
    cut at `limit` characters.
    """
    text = value if isinstance(value, str) else str(value)
    out = []
    for ch in text[:limit]:
        if ch in _SHORT_ESCAPES:
            out.append(_SHORT_ESCAPES[ch])
        elif ch.isprintable():
            out.append(ch)
        elif ord(ch) < 0x100:
            out.append(f"\\x{ord(ch):02x}")
        elif ord(ch) < 0x10000:
            out.append(f"\\u{ord(ch):04x}")
        else:
            out.append(f"\\U{ord(ch):08x}")
    if len(text) > limit:
        out.append(f"... ({len(text)} characters)")
    return "".join(out)


def _refused_character(value: str) -> str | None:
    for ch in value:
        if unicodedata.category(ch) in _REFUSED_CATEGORIES:
            return f"U+{ord(ch):04X}"
    return None


def check_id(value: Any, what: str, *, limit: int = MAX_ID) -> str:
    """An id, exactly as given, if it is one; else `InvalidRequest`."""
    if not isinstance(value, str):
        raise InvalidRequest(f"{what} must be a string, not {preview(value)}", field=what)
    if not value:
        raise InvalidRequest(f"{what} must not be empty", field=what)
    if len(value) > limit:
        raise InvalidRequest(
            f"{what} {preview(value)} is too long: at most {limit} characters", field=what
        )
    bad = _refused_character(value)
    if bad is not None:
        raise InvalidRequest(
            f"{what} {preview(value)} contains a control or invisible character ({bad})", field=what
        )
    return value


def check_text(
    value: Any, what: str, *, limit: int, required: bool = False, default: str = ""
) -> str:
    """A reason or comment: at most `limit` characters, newlines and tabs allowed."""
    if value is None and not required:
        return default
    if not isinstance(value, str):
        raise InvalidRequest(f"{what} must be a string, not {preview(value)}", field=what)
    if required and not value.strip():
        raise InvalidRequest(f"{what} is required and must not be blank", field=what)
    if len(value) > limit:
        raise InvalidRequest(
            f"{what} is too long: {len(value)} characters, at most {limit}", field=what
        )
    for ch in value:
        if ch not in "\n\t" and unicodedata.category(ch) in ("Cc", "Cs", "Zl", "Zp"):
            raise InvalidRequest(
                f"{what} contains a control character (U+{ord(ch):04X})", field=what
            )
    return value


def check_identity(value: Any, what: str) -> str:
    """A person's name in its normal form (see the module); `InvalidRequest` if it is none."""
    value = check_id(value, what, limit=MAX_IDENTITY)
    if value != value.strip():
        raise InvalidRequest(f"{what} {preview(value)} starts or ends with a space", field=what)
    if any(ch.isspace() and ch != " " for ch in value):
        raise InvalidRequest(f"{what} {preview(value)} contains a tab or line break", field=what)
    return normal_identity(value)


def normal_identity(value: str) -> str:
    """NFKC, case folding, and ASCII look-alikes replaced by the ASCII they look like."""
    folded = unicodedata.normalize("NFKC", value).casefold()
    if folded.isascii():
        return folded
    table = _ascii_lookalikes()
    out = "".join(table.get(ch, ch) for ch in folded)
    return unicodedata.normalize("NFKC", out).casefold()


@functools.cache
def _ascii_lookalikes() -> dict[str, str]:
    """Non-ASCII characters that Unicode's confusables data maps to ASCII text."""
    from confusable_homoglyphs import confusables  # 1 MB of data: loaded on first use

    table: dict[str, str] = {}
    for ch, glyphs in confusables.confusables_data.items():
        if ch.isascii():
            continue
        for glyph in glyphs:
            text = str(glyph.get("c", ""))
            if text and text.isascii() and text.isprintable():
                table[ch] = text.casefold()
                break
    return table
