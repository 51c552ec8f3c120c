"""Rendering console pages, and who is looking at them.

`signed_in(request)` is the visit of the browser's session (`Visit`: the principal
with its current roles, and the session's CSRF token), or raises `SignInNeeded`,
which answers with the sign-in page's address. `page(...)` renders a template of
`templates/console/` with what every page needs (the visit, `can`, the CSRF token).
"""

from __future__ import annotations

import re
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, replace
from functools import cache
from typing import Any, TypeVar
from urllib.parse import parse_qsl, quote

import jinja2
from fastapi import APIRouter, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response

from waypost.client.engine import AsyncEngine
from waypost.errors import InvalidRequest, SessionEnded, TenantDisabled, WaypostError
from waypost.model import operations as ops
from waypost.model.identity import Principal, Role, preview

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
C = TypeVar("C")  # a page's command
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
    return message_page(
        None, 400, "Not done", f"This form could not be read ({exc}), so nothing was done."
    )


class TenantClosed(Exception):
    """The session's tenant is disabled: every page and form answers 403, nothing done."""


async def tenant_closed(request: Request, exc: Exception) -> Response:
    return message_page(None, 403, "Tenant disabled", f"Nothing was done: {exc}.")


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
    pending_approvals: int = 0
    """Approvals the principal may decide now (at most `PENDING_COUNTED`), for the
    navigation's count; 0 for a principal that decides none."""

    def can(self, operation: type[ops.Request[Any]]) -> bool:
        """Whether the principal's roles allow the operation (the door checks again)."""
        return self.principal.may(operation.roles)

    @property
    def decides(self) -> bool:
        """Whether the principal is an approver (the door decides the rest)."""
        roles = self.principal.roles
        return Role.APPROVER in roles or Role.ADMIN in roles


PENDING_COUNTED = 99
"""The navigation counts the approvals a principal may decide up to this many ("99+")."""


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
    """The visit of a page (or a form's answer, which is a page): with the count of
    approvals its principal may decide, which the navigation shows."""
    visit = await visit_of(request)
    if visit is None:
        raise SignInNeeded(request.url.path)
    if not visit.decides:
        return visit
    try:
        mine = await engine_of(request).execute(
            ops.ListApprovals(approver=visit.principal.subject, limit=PENDING_COUNTED + 1),
            visit.principal,
        )
    except WaypostError:
        return visit  # the Approvals page says why; the navigation shows no count
    return replace(visit, pending_approvals=len(mine))


async def signed_form(request: Request) -> tuple[Visit, dict[str, str], Response | None]:
    """The signed-in visit, its posted form, and the 403 answer to give instead of doing
    anything if the form is not genuine (None if it is)."""
    visit = await signed_in(request)
    form = await read_form(request)
    refused = None if genuine(request, visit, form) else forbidden(visit, CSRF_REFUSED)
    return visit, form, refused


async def posted_command(
    request: Request, commands: Mapping[str, C], name: str, what: str = ""
) -> tuple[Visit, dict[str, str], C] | Response:
    """The signed-in visit, its posted form and the command `name` of a page's
    `commands`; or what to answer instead of doing anything: 403 if the form is not
    genuine, 404 if the page has no such command (`what`: "", "schedule ")."""
    visit, form, refused = await signed_form(request)
    if refused is not None:
        return refused
    chosen = commands.get(name)
    if chosen is None:
        return no_such_command(visit, what, name)
    return visit, form, chosen


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
        return message_page(
            None, 401, "Signed out", "Your session has ended, so nothing was done. Sign in again."
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


@dataclass(frozen=True)
class Notice:
    """What a page says on top after its form's command: done (kind "ok"), or refused
    (kind "bad", with the refusal's status as the page's)."""

    text: str = ""
    kind: str = "ok"
    status: int = 200

    def values(self) -> dict[str, Any]:
        """The page's `status`, `notice` and `notice_kind`."""
        return {"status": self.status, "notice": self.text, "notice_kind": self.kind}


NO_NOTICE = Notice()  # a page drawn without a command


def message_page(
    visit: Visit | None, status: int, title: str, message: str, notice: Notice = NO_NOTICE
) -> HTMLResponse:
    """A page that only says something: `title` and `message`, answered with `status`
    (and the `notice` of a command done before, if any)."""
    return page(
        "console/message.html",
        visit,
        status=status,
        title=title,
        message=message,
        notice=notice.text,
        notice_kind=notice.kind,
    )


def refusal(exc: WaypostError) -> tuple[int, str]:
    """The HTTP status and the message of the door's refusal."""
    status, body, _ = answer(exc)
    message: str = body["error"]["message"]
    return status, message


async def list_page(
    request: Request,
    template: str,
    operation: ops.Request[Any],
    name: str,
    *,
    nav: str,
    listed: Callable[[Any], Any] = lambda found: found,
    **values: Any,
) -> Response:
    """The page of what the door answers `operation` for the signed-in visit:
    `listed(<its answer>)` as the template's `name` (empty, with the refusal's status and
    message as `error`, if the door refuses)."""
    visit = await signed_in(request)
    status, error, found = 200, "", []
    try:
        found = listed(await engine_of(request).execute(operation, visit.principal))
    except WaypostError as exc:
        status, error = refusal(exc)
    return page(template, visit, status=status, nav=nav, error=error, **{name: found}, **values)


def add_object_page(
    router: APIRouter, path: str, draw: Callable[[Request, Visit, str], Awaitable[Response]]
) -> None:
    """Serve GET `path`, the page of the object its one path field names:
    `draw(request, visit, <that field>)` for the signed-in visit."""
    (field,) = re.findall(r"{(\w+)", path)

    async def show(request: Request) -> Response:
        visit = await signed_in(request)
        return await draw(request, visit, request.path_params[field])

    router.add_api_route(path, show, methods=["GET"])


def not_shown(
    visit: Visit, exc: WaypostError, title: str, notice: Notice = NO_NOTICE
) -> HTMLResponse:
    """The page `title` names, refused: the refusal's status and message (and the
    `notice` of a command done before, if any)."""
    status, message = refusal(exc)
    return message_page(visit, status, title, message, notice)


def not_done(exc: WaypostError, what: str) -> Notice:
    """The notice of a form's command the door refused: "`what` not done. <the
    refusal's message>", with the refusal's status."""
    status, message = refusal(exc)
    return Notice(f"{what} {message}", "bad", status)


def forbidden(visit: Visit | None, message: str) -> HTMLResponse:
    return message_page(visit, 403, "Not done", message)


def no_such_command(visit: Visit, what: str, name: str) -> HTMLResponse:
    """404 for a form posted to a command the page does not have (`what`: "", "schedule ")."""
    return message_page(
        visit, 404, "No such command", f"There is no {what}command {preview(name)}."
    )


CSRF_REFUSED = (
    "This form could not be checked (it did not come from this console page, or it is "
    "from an earlier session). Nothing was done: open the page again and retry."
)
