"""What every API route that takes a JSON body shares, declared once.

- **Text only.** A JSON body is text, but JSON can spell half of a surrogate pair
  (`"\\udc00"`, or its three raw bytes): a string no UTF-8 store, hash or answer can
  carry as it is. `ApiRoute` refuses such a body (422 `invalid_request`, with where it
  is) before its route runs, so nothing of it is written, on every route whose body the
  framework parses. A body without `\\u` escapes that is strict UTF-8 holds none and is
  not looked at twice.
- **Answers of any text.** Its answers are encoded by `JsonAnswer` without a response
  model, so that what was stored before (or by the embedded API) is always readable.
- **Documented refusals.** Every `ApiRoute` that takes a body declares the 400
  (`bad_json`) and 413 (`too_large`) answers in the OpenAPI description, whichever
  router it is on.
"""

from __future__ import annotations

import re
import types
import typing
from collections.abc import Callable, Coroutine, Mapping
from typing import Any

from fastapi import APIRouter, Request, Response
from fastapi.routing import APIRoute
from pydantic import BaseModel, Field

from waypost.errors import InvalidRequest
from waypost.model.definitions.format import join_path

_LONE_SURROGATE = re.compile("[\ud800-\udfff]")


class ErrorDetail(BaseModel):
    code: str = Field(description="The error's kind, stable for clients (snake case).")
    message: str
    details: dict[str, Any] = Field(
        description="What a client acts on: `problems` (each with `path` and `message`), "
        "`field`, `quota`."
    )


class ErrorBody(BaseModel):
    error: ErrorDetail


BODY_ERRORS: dict[int | str, dict[str, Any]] = {
    400: {"model": ErrorBody, "description": "The body is not JSON the API can read."},
    413: {"model": ErrorBody, "description": "The body is too large."},
}


def surrogate_path(value: Any) -> str | None:
    """Where in a parsed JSON value a string (or a key) holds half of a surrogate pair."""
    todo: list[tuple[Any, str]] = [(value, "$")]
    while todo:
        item, path = todo.pop()
        if isinstance(item, str):
            if not item.isascii() and _LONE_SURROGATE.search(item):
                return path
        elif isinstance(item, Mapping):
            for key, child in item.items():
                if isinstance(key, str) and not key.isascii() and _LONE_SURROGATE.search(key):
                    return f"{path} (a key)"
                todo.append((child, join_path(path, str(key))))
        elif isinstance(item, list):
            todo.extend((child, join_path(path, index)) for index, child in enumerate(item))
    return None


def _may_hold_surrogates(body: bytes) -> bool:
    if b"\\u" in body:
        return True
    try:
        body.decode("utf-8")
    except UnicodeDecodeError:
        return True  # the JSON parser reads the bytes of a surrogate too
    return False


async def refuse_half_surrogates(request: Request) -> None:
    """Raise `InvalidRequest` if the request's JSON body holds half a surrogate pair."""
    body = await request.body()
    if not body or not _may_hold_surrogates(body):
        return
    try:
        value = await request.json()  # kept by the request: the route reads it from there
    except (ValueError, RecursionError):
        return  # not JSON: the route's own parsing answers it
    where = surrogate_path(value)
    if where is not None:
        raise InvalidRequest(
            f"the request body holds half of a surrogate pair at {where}, which is not "
            "text: nothing was done",
            field=where,
        )


class ApiRoute(APIRoute):
    """An API route: its JSON body checked for text, its answer encoded by `JsonAnswer`."""

    def __init__(self, path: str, endpoint: Callable[..., Any], **options: Any) -> None:
        # No response model: a model's serializer mangles a lone surrogate. The routes
        # answer JSON objects, which the description still says.
        options["response_model"] = None
        responses = dict(options.get("responses") or {})
        if typing.get_origin(typing.get_type_hints(endpoint).get("return")) is dict:
            status = options.get("status_code") or 200
            entry = dict(responses.get(status, {}))
            entry["content"] = {"application/json": {"schema": {"type": "object"}}}
            responses[status] = entry
        if takes_body(endpoint, options.get("openapi_extra")):
            responses = {**BODY_ERRORS, **responses}
        options["responses"] = responses
        super().__init__(path, endpoint, **options)

    def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
        handler = super().get_route_handler()
        if self.body_field is None:
            return handler

        async def checked(request: Request) -> Response:
            await refuse_half_surrogates(request)
            return await handler(request)

        return checked


def api_router(**options: Any) -> APIRouter:
    """An APIRouter of `ApiRoute`s (each API module's router)."""
    return APIRouter(route_class=ApiRoute, **options)


def takes_body(endpoint: Callable[..., Any], openapi_extra: Mapping[str, Any] | None) -> bool:
    """Whether a route reads a request body: a parameter that is a model (a JSON body the
    framework parses), or a body it reads itself and describes (`openapi_extra`)."""
    if openapi_extra and "requestBody" in openapi_extra:
        return True
    for hint in typing.get_type_hints(endpoint, include_extras=True).values():
        kinds = typing.get_args(hint) if isinstance(hint, types.UnionType) else (hint,)
        if any(isinstance(k, type) and issubclass(k, BaseModel) for k in kinds):
            return True
    return False
