"""Rendering console pages, and who is looking at them.

`signed_in(request)` is the visit of the browser's session (`Visit`: the principal
with its current roles, and the session's CSRF token), or raises `SignInNeeded`,
which answers with the sign-in page's address. `page(...)` renders a template of
`templates/console/` with what every page needs (the visit, `can`, the CSRF token).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import cache
from typing import Any
from urllib.parse import parse_qsl, quote

import jinja2
from fastapi import Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response

from waypost.client.engine import AsyncEngine
from waypost.errors import InvalidRequest, SessionEnded, TenantDisabled, WaypostError
from waypost.model import operations as ops
from waypost.model.identity import Principal, preview

from ..answers import HtmlAnswer
from ..errors import answer
from . import filters
from .security import SESSION_COOKIE, ConsoleSecret, same_origin

HEADERS = {
    "Content-Security-Policy": (
        "default-src 'none'; style-src 'self'; script-src 'self'; img-src 'self'; "
        "connect-src 'self'; form-action 'self'; base-uri 'none'; frame-ancestors 'none'"
    ),
    "Referrer-Policy": "same-origin",
    "X-Content-Type-Options": "nosniff",
    "X-Frame-Options": "DENY",
    "Cache-Control": "no-store",
}
_LOCAL_PATH = re.compile(r"/(?![/\\])[\x21-\x7e]{0,500}")


MAX_FIELDS = 50


class FormUnreadable(Exception):
    """A form that is not URL-encoded UTF-8 text: refused whole, nothing done."""


async def read_form(request: Request) -> dict[str, str]:
    """The fields of a URL-encoded form, strictly: UTF-8 only (a browser sends the page's
    charset), at most `MAX_FIELDS`; the first of a repeated field counts."""
    kind = request.headers.get("content-type", "").split(";")[0].strip().lower()
    if kind != "application/x-www-form-urlencoded":
        raise FormUnreadable("the form is not URL-encoded")
    body = await request.body()
    try:
        pairs = parse_qsl(
            body.decode("ascii"),
            keep_blank_values=True,
            strict_parsing=False,
            encoding="utf-8",
            errors="strict",
            max_num_fields=MAX_FIELDS,
        )
    except (UnicodeDecodeError, ValueError):
        raise FormUnreadable("the form's text is not UTF-8") from None
    fields: dict[str, str] = {}
    for name, value in pairs:
        fields.setdefault(name, value)
    return fields


def query_of(request: Request) -> dict[str, str]:
    """The page address's query, strictly UTF-8 (`InvalidRequest` otherwise)."""
    raw = request.scope.get("query_string", b"")
    try:
        pairs = parse_qsl(
            raw.decode("ascii"),
            keep_blank_values=True,
            encoding="utf-8",
            errors="strict",
            max_num_fields=MAX_FIELDS,
        )
    except (UnicodeDecodeError, ValueError):
        raise InvalidRequest("the page's address is not UTF-8 text", field="query") from None
    found: dict[str, str] = {}
    for name, value in pairs:
        found.setdefault(name, value)
    return found


async def form_unreadable(request: Request, exc: Exception) -> Response:
    return page(
        "console/message.html",
        None,
        status=400,
        title="Not done",
        message=f"This form could not be read ({exc}), so nothing was done.",
    )


class TenantClosed(Exception):
    """The session's tenant is disabled: every page and form answers 403, nothing done."""


async def tenant_closed(request: Request, exc: Exception) -> Response:
    return page(
        "console/message.html",
        None,
        status=403,
        title="Tenant disabled",
        message=f"Nothing was done: {exc}.",
    )


class SignInNeeded(Exception):
    """No live session: the browser is sent to the sign-in page (and back after)."""

    def __init__(self, path: str) -> None:
        self.path = path


@dataclass(frozen=True)
class Visit:
    """A signed-in browser: who it is now, its session token and its CSRF token."""

    principal: Principal
    token: str
    csrf: str
    kind: str

    def can(self, operation: type[ops.Request[Any]]) -> bool:
        """Whether the principal's roles allow the operation (the door checks again)."""
        return self.principal.may(operation.roles)


def engine_of(request: Request) -> AsyncEngine:
    engine: AsyncEngine = request.app.state.engine
    return engine


def secret_of(request: Request) -> ConsoleSecret:
    secret: ConsoleSecret = request.app.state.console_secret
    return secret


async def visit_of(request: Request) -> Visit | None:
    """The visit of the request's session cookie, or None."""
    secret = secret_of(request)
    token = secret.token_of(request.cookies.get(SESSION_COOKIE))
    if token is None:
        return None
    try:
        view = await engine_of(request).execute(
            ops.ResolveSession(token=token), Principal.anonymous()
        )
    except SessionEnded:
        return None
    except TenantDisabled as exc:
        raise TenantClosed(str(exc)) from None
    return Visit(view.principal, token, secret.csrf_of(token), view.kind.value)


async def signed_in(request: Request) -> Visit:
    visit = await visit_of(request)
    if visit is None:
        raise SignInNeeded(request.url.path)
    return visit


async def signed_form(request: Request) -> tuple[Visit, dict[str, str], Response | None]:
    """The signed-in visit, its posted form, and the 403 answer to give instead of doing
    anything if the form is not genuine (None if it is)."""
    visit = await signed_in(request)
    form = await read_form(request)
    refused = None if genuine(request, visit, form) else forbidden(visit, CSRF_REFUSED)
    return visit, form, refused


def genuine(request: Request, visit: Visit, form: Any) -> bool:
    """Whether a posted form comes from this site's page for this session: the request's
    origin is ours and the form carries the session's CSRF token."""
    return same_origin(request) and secret_of(request).csrf_matches(visit.token, form.get("csrf"))


def local_path(value: object, default: str = "/runs") -> str:
    """`value` if it is a path of this site (never another site's address), else `default`."""
    if isinstance(value, str) and _LOCAL_PATH.fullmatch(value):
        return value
    return default


async def sign_in_needed(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, SignInNeeded)
    if request.method != "GET":
        return page(
            "console/message.html",
            None,
            status=401,
            title="Signed out",
            message="Your session has ended, so nothing was done. Sign in again.",
        )
    target = "/sign-in?next=" + quote(local_path(exc.path), safe="/")
    return RedirectResponse(target, status_code=303, headers={"Cache-Control": "no-store"})


@cache
def templates() -> jinja2.Environment:
    env = jinja2.Environment(
        loader=jinja2.PackageLoader("waypost.server", "templates"),
        autoescape=True,
        undefined=jinja2.StrictUndefined,
    )
    filters.install(env)
    return env


def page(
    name: str, visit: Visit | None, *, status: int = 200, nav: str = "", **values: Any
) -> HTMLResponse:
    values.setdefault("notice", "")
    values.setdefault("notice_kind", "ok")
    html = templates().get_template(name).render(visit=visit, ops=ops, nav=nav, **values)
    return HtmlAnswer(html, status_code=status, headers=HEADERS)


def refusal(exc: WaypostError) -> tuple[int, str]:
    """The HTTP status and the message of the door's refusal."""
    status, body, _ = answer(exc)
    message: str = body["error"]["message"]
    return status, message


def not_shown(visit: Visit, exc: WaypostError, title: str, **notice: str) -> HTMLResponse:
    """The page `title` names, refused: the refusal's status and message (and the
    `notice` and `notice_kind` of a command done before, if given)."""
    status, message = refusal(exc)
    return page(
        "console/message.html", visit, status=status, title=title, message=message, **notice
    )


def not_done(exc: WaypostError, what: str) -> dict[str, Any]:
    """A page's `status`, `notice` and `notice_kind` after its form's command was
    refused: "`what` not done. <the refusal's message>"."""
    status, message = refusal(exc)
    return {"status": status, "notice": f"{what} {message}", "notice_kind": "bad"}


def forbidden(visit: Visit | None, message: str) -> HTMLResponse:
    return page("console/message.html", visit, status=403, title="Not done", message=message)


def no_such_command(visit: Visit, what: str, name: str) -> HTMLResponse:
    """404 for a form posted to a command the page does not have (`what`: "", "schedule ")."""
    message = f"There is no {what}command {preview(name)}."
    return page("console/message.html", visit, status=404, title="No such command", message=message)


CSRF_REFUSED = (
    "This form could not be checked (it did not come from this console page, or it is "
    "from an earlier session). Nothing was done: open the page again and retry."
)
