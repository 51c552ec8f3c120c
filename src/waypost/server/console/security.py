"""The console's cookie, CSRF tokens and origin check.

The session cookie holds the session's random token and an HMAC of it under the
server's console secret (`ConsoleSecret`), so that a cookie the server did not issue
is refused before the database is asked. It is HttpOnly, SameSite=Lax, Secure over
https, and lives as long as the session. Only the token's SHA-256 is stored
(`features/users.py`).

Every form carries the session's CSRF token: an HMAC of the session's token under the
secret, so one per session, compared with `hmac.compare_digest` as UTF-8 bytes (`same_secret`:
a cookie or field of any text is refused, never an error); a POST without the
right one is refused (403) before anything is done. The sign-in form, before any
session, carries a random token that must match a cookie set with the form. A POST
whose `Origin` (or `Sec-Fetch-Site`) says it came from another site is refused too.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import secrets
from dataclasses import dataclass

from fastapi import Request, Response

SESSION_COOKIE = "waypost_session"
SIGNIN_COOKIE = "waypost_signin"
SECRET_BYTES = 32


@dataclass(frozen=True)
class ConsoleSecret:
    """The key the console signs its cookies and derives CSRF tokens with.

    Every process of one server must hold the same (`waypost server` passes one to
    each); a new one signs everyone out."""

    key: bytes

    @classmethod
    def random(cls) -> ConsoleSecret:
        return cls(secrets.token_bytes(SECRET_BYTES))

    @classmethod
    def from_text(cls, text: str) -> ConsoleSecret:
        """From hex text (of `new_secret_text`), or any text of at least 32 characters."""
        try:
            key = bytes.fromhex(text)
        except ValueError:
            key = text.encode("utf-8")
        if len(key) < SECRET_BYTES:
            raise ValueError(f"a console secret has at least {SECRET_BYTES} bytes")
        return cls(key)

    def _mac(self, purpose: str, value: str) -> str:
        digest = hmac.new(self.key, f"{purpose}:{value}".encode(), hashlib.sha256).digest()
        return base64.urlsafe_b64encode(digest).rstrip(b"=").decode("ascii")

    def cookie_value(self, token: str) -> str:
        return f"{token}.{self._mac('cookie', token)}"

    def token_of(self, cookie: str | None) -> str | None:
        """The session token a cookie carries, if this server signed it."""
        if not cookie or len(cookie) > 200 or "." not in cookie:
            return None
        token, _, mac = cookie.rpartition(".")
        if not token or not same_secret(mac, self._mac("cookie", token)):
            return None
        return token

    def csrf_of(self, token: str) -> str:
        return self._mac("csrf", token)

    def csrf_matches(self, token: str, sent: object) -> bool:
        return isinstance(sent, str) and same_secret(sent, self.csrf_of(token))


def same_secret(given: str, kept: str) -> bool:
    """Whether a secret a browser sent (a cookie, a form's token) is the one kept, compared in
    constant time as UTF-8 bytes: text of any characters (a cookie's non-ASCII bytes, a
    field's lone surrogate) is simply not equal."""
    return hmac.compare_digest(
        given.encode("utf-8", "surrogatepass"), kept.encode("utf-8", "surrogatepass")
    )


def new_secret_text() -> str:
    return secrets.token_hex(SECRET_BYTES)


def same_origin(request: Request) -> bool:
    """False when the browser says the request came from another site."""
    site = request.headers.get("sec-fetch-site")
    if site is not None and site not in ("same-origin", "none"):
        return False
    origin = request.headers.get("origin")
    if origin is None:
        return True  # not a browser's cross-site form: the CSRF token still decides
    if origin == "null":
        # A page whose referrer policy is no-referrer (the approval page's, so its link never
        # leaves it) makes the browser send its own form's origin as "null": believed only
        # when the browser also says the form came from this site.
        return site == "same-origin"
    host = request.headers.get("host", "")
    return origin == f"{request.url.scheme}://{host}"


def secure(request: Request) -> bool:
    return request.url.scheme == "https"


def set_form_cookie(response: Response, request: Request, name: str, value: str, path: str) -> None:
    """Set the cookie a form's CSRF check compares with the form: sent to `path` only,
    never read by scripts nor sent from another site, over HTTPS when the page is, for
    an hour."""
    response.set_cookie(
        name,
        value,
        httponly=True,
        samesite="strict",
        secure=secure(request),
        path=path,
        max_age=3600,
    )


def signin_token() -> str:
    return secrets.token_urlsafe(32)
