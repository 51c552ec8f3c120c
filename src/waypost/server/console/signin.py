"""Signing in (a user's password, or an API key) and out.

The sign-in form carries a random token matching a cookie set with it (no session
exists yet to derive one from), and every refusal shows one and the same message.
"""

from __future__ import annotations

import math

from fastapi import APIRouter, Request
from fastapi.responses import RedirectResponse, Response

from waypost.errors import (
    InvalidRequest,
    SignInBusy,
    SignInRefused,
    TenantDisabled,
    WaypostError,
)
from waypost.model import operations as ops
from waypost.model.identity import Principal
from waypost.model.users import SESSION_SECONDS

from .pages import (
    CSRF_REFUSED,
    engine_of,
    forbidden,
    genuine,
    local_path,
    page,
    read_form,
    secret_of,
    visit_of,
)
from .security import (
    SESSION_COOKIE,
    SIGNIN_COOKIE,
    same_origin,
    same_secret,
    secure,
    set_form_cookie,
    signin_token,
)

router = APIRouter(include_in_schema=False)

BUSY = "The console is checking many sign-ins at once: try again in a moment."
REFUSED = (
    "Sign-in refused: the tenant, user name, password or API key is not right, or the "
    "account cannot sign in now."
)


@router.get("/")
async def home(request: Request) -> Response:
    visit = await visit_of(request)
    return RedirectResponse("/runs" if visit else "/sign-in", status_code=303)


def _form(request: Request, *, status: int = 200, error: str = "", next_path: str = "") -> Response:
    token = signin_token()
    response = page(
        "console/signin.html",
        None,
        status=status,
        error=error,
        signin_csrf=token,
        next_path=local_path(next_path),
    )
    set_form_cookie(response, request, SIGNIN_COOKIE, token, "/sign-in")
    return response


@router.get("/sign-in")
async def sign_in_page(request: Request, next: str = "") -> Response:
    return _form(request, next_path=next)


def _field(form: dict[str, str], name: str) -> str | None:
    """A field's text; None when empty (the door bounds the rest)."""
    return form.get(name) or None


@router.post("/sign-in")
async def sign_in(request: Request) -> Response:
    form = await read_form(request)
    sent, kept = form.get("csrf"), request.cookies.get(SIGNIN_COOKIE)
    next_path = local_path(form.get("next"))
    if (
        not same_origin(request)
        or not isinstance(sent, str)
        or not kept
        or not same_secret(sent, kept)
    ):
        return _form(request, status=403, error=CSRF_REFUSED, next_path=next_path)
    key = _field(form, "key")
    request_args: dict[str, str | None] = (
        {"key": key}
        if key is not None
        else {
            "tenant": _field(form, "tenant"),
            "user": _field(form, "user"),
            "password": _field(form, "password"),
        }
    )
    address = request.client.host if request.client else ""
    try:
        session = await engine_of(request).execute(
            ops.SignIn(**request_args, address=address[:100]), Principal.anonymous()
        )
    except (SignInRefused, InvalidRequest):
        return _form(request, status=401, error=REFUSED, next_path=next_path)
    except TenantDisabled as exc:
        return _form(request, status=403, error=f"{exc}.", next_path=next_path)
    except SignInBusy:
        busy = _form(request, status=503, error=BUSY, next_path=next_path)
        busy.headers["Retry-After"] = str(math.ceil(SignInBusy.retry_after))
        return busy
    except WaypostError:
        return _form(request, status=503, error="The console cannot sign in now; try again.")
    response = RedirectResponse(next_path, status_code=303)
    response.set_cookie(
        SESSION_COOKIE,
        secret_of(request).cookie_value(session.token),
        httponly=True,
        samesite="lax",
        secure=secure(request),
        path="/",
        max_age=int(SESSION_SECONDS),
    )
    response.delete_cookie(SIGNIN_COOKIE, path="/sign-in")
    return response


@router.post("/sign-out")
async def sign_out(request: Request) -> Response:
    visit = await visit_of(request)
    form = await read_form(request)
    if visit is not None:
        if not genuine(request, visit, form):
            return forbidden(visit, CSRF_REFUSED)
        await engine_of(request).execute(ops.SignOut(token=visit.token), Principal.anonymous())
    response = RedirectResponse("/sign-in", status_code=303)
    response.delete_cookie(SESSION_COOKIE, path="/")
    return response
