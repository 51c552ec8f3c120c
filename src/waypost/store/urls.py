"""Database URLs as they may be shown: the password replaced by "***".

Every message and log line that shows a database URL goes through `redact_url`,
so a PostgreSQL password (in the user part, or as a `password` parameter) never
reaches a terminal, a log or an error report.
"""

from __future__ import annotations

import re
from urllib.parse import unquote, urlsplit

_HIDDEN = "***"
_SECRET_PARAMETERS = frozenset({"password", "sslpassword"})
_WITH_PORT = re.compile(r":[0-9]+$")


def redact_url(url: str) -> str:
    """`url` with its password, and any password parameter, replaced by "***"."""
    try:
        parts = urlsplit(url)
        password = parts.password
    except ValueError:
        # Not parseable, so its parts cannot be told apart: show only the scheme.
        return f"{url.partition(':')[0]}://{_HIDDEN}"
    shown = url
    if password is not None:
        userinfo, _, hosts = parts.netloc.rpartition("@")
        netloc = f"{userinfo.partition(':')[0]}:{_HIDDEN}@{hosts}"
        shown = shown.replace(f"//{parts.netloc}", f"//{netloc}", 1)
    query = "&".join(
        f"{key}={_HIDDEN}" if unquote(key).lower() in _SECRET_PARAMETERS else item
        for item in parts.query.split("&")
        for key in [item.partition("=")[0]]
    )
    if query != parts.query:
        shown = shown.replace(f"?{parts.query}", f"?{query}", 1)
    return shown


def scrub_password(text: str, url: str) -> str:
    """`text` (an error from the database driver) without the URL's password in it."""
    try:
        password = urlsplit(url).password
    except ValueError:
        return text
    if not password:
        return text
    for form in {password, unquote(password)}:
        if len(form) >= 4:  # a shorter one would blot out ordinary words
            text = text.replace(form, _HIDDEN)
    return text


def server_of(url: str) -> str:
    """Where a PostgreSQL URL points, as messages name it: `host:port/database`; a URL
    that lists several hosts (a primary and its standbys) names each with its port."""
    parts = urlsplit(url)
    hosts = parts.netloc.rpartition("@")[2]
    if "," not in hosts:
        return f"{parts.hostname or 'localhost'}:{parts.port or 5432}{parts.path}"
    listed = (h if _WITH_PORT.search(h) else f"{h or 'localhost'}:5432" for h in hosts.split(","))
    return f"{','.join(listed)}{parts.path}"
