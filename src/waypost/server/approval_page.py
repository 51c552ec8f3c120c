"""The approval page: what a notification's link opens.

`GET /approve/{credential}` shows what is being decided (the data the step
exposes, who asked, who decided before, the expiry) and a confirmation form;
only the form's POST decides. A GET never changes anything: mail scanners and
link previews follow links. Every credential that cannot decide now (unknown,
spent, expired, revoked, the approval no longer pending) gets one and the same
page, so the page tells an attacker nothing about which.

The form carries a CSRF token that must match a cookie set with the page
(SameSite=Strict, HttpOnly): another site cannot make a browser post it. A POST whose
`Origin` (or `Sec-Fetch-Site`) names another site is refused as well, before the
token is looked at (behind a trusted proxy, the origin is the one the proxy was
reached at). The
pages load nothing from elsewhere (a strict Content-Security-Policy) and send
no Referer, so the credential in the URL does not leak to other sites.
"""

from __future__ import annotations

import json
import secrets
from functools import cache
from importlib import resources
from typing import Any

import jinja2
from fastapi import APIRouter, Request
from fastapi.responses import HTMLResponse, Response

from waypost.errors import InvalidCredential, WaypostError
from waypost.features.access import tenant_disabled
from waypost.model import operations as ops
from waypost.model.identity import Principal, Role

from .answers import HtmlAnswer
from .console.security import same_origin, same_secret, set_form_cookie
from .errors import answer

router = APIRouter(include_in_schema=False)

CSRF_COOKIE = "waypost_csrf"
HEADERS = {
    "Referrer-Policy": "no-referrer",
    "Content-Security-Policy": (
        "default-src 'none'; style-src 'self'; img-src 'self'; form-action 'self'; "
        "base-uri 'none'; frame-ancestors 'none'"
    ),
    "X-Content-Type-Options": "nosniff",
    "X-Frame-Options": "DENY",
    "Cache-Control": "no-store",
}
UNUSABLE = (
    "This link cannot be used: it has been used already, has expired, or was withdrawn. "
    "Nothing was recorded. If you still need to decide, ask for a new link."
)


@cache
def _templates() -> jinja2.Environment:
    return jinja2.Environment(
        loader=jinja2.PackageLoader("waypost.server", "templates"),
        autoescape=True,
        undefined=jinja2.StrictUndefined,
    )


def _page(name: str, status: int = 200, **values: Any) -> HTMLResponse:
    html = _templates().get_template(name).render(**values)
    return HtmlAnswer(html, status_code=status, headers=HEADERS)


@router.get("/static/waypost.css")
async def stylesheet() -> Response:
    css = resources.files("waypost.server").joinpath("static/waypost.css").read_text()
    return Response(
        css,
        media_type="text/css",
        headers={"Cache-Control": "max-age=3600", "X-Content-Type-Options": "nosniff"},
    )


async def _view(request: Request, credential: str) -> Any:
    """What the credential may decide; `TenantDisabled` if its tenant is disabled."""
    engine = request.app.state.engine
    view = await engine.execute(ops.ResolveCredential(token=credential), Principal.anonymous())
    approver = Principal(view.tenant, view.approver, frozenset({Role.APPROVER}))
    tenant = await engine.execute(ops.GetTenant(), approver)
    if tenant.disabled:
        raise tenant_disabled(view.tenant)
    return view


@router.get("/approve/{credential}")
async def show(request: Request, credential: str) -> Response:
    try:
        view = await _view(request, credential)
    except InvalidCredential:
        return _page("message.html", 410, title="Link not usable", message=UNUSABLE)
    except WaypostError as exc:
        return _failure(exc)
    csrf = secrets.token_urlsafe(32)
    response = _page("approve.html", view=view, data=_pretty(view.data), csrf=csrf)
    set_form_cookie(response, request, CSRF_COOKIE, csrf, "/approve/")
    return response


@router.post("/approve/{credential}")
async def confirm(request: Request, credential: str) -> Response:
    form = await request.form()
    sent = form.get("csrf")
    kept = request.cookies.get(CSRF_COOKIE)
    if (
        not same_origin(request)
        or not isinstance(sent, str)
        or not kept
        or not same_secret(sent, kept)
    ):
        message = (
            "This form could not be checked (it did not come from this page, or your browser "
            "refused its cookie). Nothing was recorded: open the link again."
        )
        return _page("message.html", 403, title="Not recorded", message=message)
    comment = form.get("comment")
    try:
        view = await _view(request, credential)
        principal = Principal(view.tenant, view.approver, frozenset({Role.APPROVER}))
        receipt = await request.app.state.engine.execute(
            ops.Decide(
                approval_id=view.approval_id,
                token=credential,
                approver=view.approver,
                decision=view.action,
                comment=comment if isinstance(comment, str) else "",
                auth="page",
            ),
            principal,
        )
    except InvalidCredential:
        return _page("message.html", 410, title="Link not usable", message=UNUSABLE)
    except WaypostError as exc:
        return _failure(exc)
    response = _page("decided.html", view=view, receipt=receipt)
    response.delete_cookie(CSRF_COOKIE, path="/approve/")
    return response


def _failure(exc: WaypostError) -> Response:
    status, body, _ = answer(exc)
    return _page("message.html", status, title="Not recorded", message=body["error"]["message"])


def _pretty(data: Any) -> str:
    return json.dumps(data, indent=2, ensure_ascii=False, sort_keys=True, default=str)
