"""Routes made from requests' declarations.

`add_route` makes an operation's route from its `Http` declaration (method, path,
status, tag): the fields its path names come from the path (as text), a JSON body (if
the route takes one) is read by the model given, the request goes to the one door and
the route answers what `answer` makes of the result. A route that only does that is
written as a call of it, with its summary and its answer; the rest are written out.

An operation declared with `Http(..., derived=True)` has its route made from its
request alone: its body model from the request's fields (types, required-ness and
descriptions), its answer `{<first path field>: ..., "accepted": true}`. Adding such an
operation adds its route: nothing is written here.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Mapping
from typing import Any

from fastapi import APIRouter, Request
from pydantic import BaseModel, Field, create_model

from waypost.model import surfaces
from waypost.model.requests import Http, Request as Operation
from waypost.model.wire import to_wire

from .common import Caller, StrictBody, door

Answer = Callable[[Any, Mapping[str, str]], dict[str, Any]]
"""What a route answers, made from the door's result and the fields of its path."""

Fields = Callable[[Mapping[str, str], Any], Mapping[str, Any]]
"""A request's fields, made from the fields of its path and its body (None if none)."""


def by_name(path: Mapping[str, str], body: Any) -> Mapping[str, Any]:
    """The path's fields and the body's, each under its own name."""
    given = {} if body is None else {n: getattr(body, n) for n in type(body).model_fields}
    return {**path, **given}


def renamed(**names: str) -> Fields:
    """The path's fields and the body's, those in `names` under the request's name for
    them (`renamed(name="user")`: the route's `name` is the request's `user`)."""

    def fields(path: Mapping[str, str], body: Any) -> Mapping[str, Any]:
        return {names.get(name, name): value for name, value in by_name(path, body).items()}

    return fields


def wired(result: Any, _: Mapping[str, str]) -> dict[str, Any]:
    """The result as JSON (`to_wire`)."""
    out: dict[str, Any] = to_wire(result)
    return out


def listed(key: str, one: Callable[[Any], Any] = to_wire) -> Answer:
    """`{key: [one(item) for each item of the result]}`."""
    return lambda found, _: {key: [one(item) for item in found]}


def done(flag: str) -> Answer:
    """`{<the first path field>: <its value>, flag: true}`: what a route whose operation
    answers nothing says (`done("deleted")`)."""

    def answer(_: Any, path: Mapping[str, str]) -> dict[str, Any]:
        first = next(iter(path))
        return {first: path[first], flag: True}

    return answer


def add_derived_routes(router: APIRouter, tag: str) -> None:
    """Add to `router` the derived route of every operation declared with `tag`."""
    for kind in surfaces.derived_http():
        http = kind.http
        assert isinstance(http, Http)
        if http.tag == tag:
            add_route(
                router,
                kind,
                done("accepted"),
                summary=http.summary or surfaces.summary(kind),
                body=_body_model(kind),
            )


def _body_model(kind: type[Operation[Any]]) -> type[BaseModel]:
    return create_model(  # type: ignore[call-overload, no-any-return]
        f"{kind.__name__}Body",
        __base__=StrictBody,
        **{
            f.name: (f.type, Field(... if f.required else f.default, description=f.doc or None))
            for f in surfaces.body_fields(kind)
        },
    )


def add_route(
    router: APIRouter,
    kind: type[Operation[Any]],
    answer: Answer,
    *,
    summary: str,
    body: type[BaseModel] | None = None,
    body_required: bool = True,
    fields: Fields = by_name,
    name: str | None = None,
    tag: str | None = None,
    responses: dict[int | str, dict[str, Any]] | None = None,
    at: Http | None = None,
) -> None:
    """Add to `router` the route of `kind`'s declaration (its method, path, status and
    tag) that makes the request of `fields(path, body)`, hands it to the door and
    answers `answer(result, path)`. Its endpoint is named `name` (default: the
    operation's name), which the OpenAPI document's operation id is made of; `tag`
    files it elsewhere than its declaration's tag in that document; `at` is a route of
    the operation's besides its declared one (one queue of `ListQueues`)."""
    http = at or kind.http
    assert isinstance(http, Http)
    in_path = http.path_fields()

    async def endpoint(**given: Any) -> dict[str, Any]:
        path = {name: given[name] for name in in_path}  # in the path's order
        operation = kind(**fields(path, given.get("body")))
        return answer(await door(given["request"], operation, given["principal"]), path)

    keyword = inspect.Parameter.KEYWORD_ONLY
    parameters = [
        inspect.Parameter("request", keyword, annotation=Request),
        *(inspect.Parameter(n, keyword, annotation=str) for n in in_path),
        inspect.Parameter("principal", keyword, annotation=Caller),
    ]
    if body is not None and body_required:
        parameters.insert(-1, inspect.Parameter("body", keyword, annotation=body))
    elif body is not None:
        parameters.append(inspect.Parameter("body", keyword, default=None, annotation=body | None))
    endpoint.__signature__ = inspect.Signature(parameters)  # type: ignore[attr-defined]
    # What `ApiRoute` reads to describe the route (its body's refusals, its JSON answer).
    endpoint.__annotations__ = {p.name: p.annotation for p in parameters}
    endpoint.__annotations__["return"] = dict[str, Any]
    endpoint.__name__ = endpoint.__qualname__ = name or _python_name(kind.name)
    router.add_api_route(
        http.path,
        endpoint,
        methods=[http.method],
        tags=[tag or http.tag],
        status_code=http.status,
        summary=summary,
        responses=responses,
    )


def _python_name(name: str) -> str:
    return name.replace(" ", "_").replace("-", "_")
