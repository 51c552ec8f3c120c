"""The routes made from requests' declarations (`Http(..., derived=True)`).

The fields a route's path names come from the path, the others from a strict JSON
body whose model is made from the request's fields (types, required-ness and
descriptions); the route hands the request to the one door and answers as its
declaration says. Adding such an operation adds its route: nothing is written here.
"""

from __future__ import annotations

import inspect
from typing import Any

from fastapi import APIRouter, Request
from pydantic import Field, create_model

from waypost.model import surfaces
from waypost.model.requests import Http, Request as Operation

from .common import Caller, StrictBody, door


def add_derived_routes(router: APIRouter, tag: str) -> None:
    """Add to `router` the derived route of every operation declared with `tag`."""
    for kind in surfaces.derived_http():
        http = kind.http
        assert isinstance(http, Http)
        if http.tag == tag:
            _add_route(router, kind, http)


def _add_route(router: APIRouter, kind: type[Operation[Any]], http: Http) -> None:
    in_path = http.path_fields()
    body = create_model(  # type: ignore[call-overload]
        f"{kind.__name__}Body",
        __base__=StrictBody,
        **{
            f.name: (f.type, Field(... if f.required else f.default, description=f.doc or None))
            for f in surfaces.body_fields(kind)
        },
    )

    async def route(request: Request, principal: Any, body: Any, **path: str) -> dict[str, Any]:
        fields = {**path, **{name: getattr(body, name) for name in type(body).model_fields}}
        await door(request, kind(**fields), principal)
        return {in_path[0]: path[in_path[0]], "accepted": True}

    async def endpoint(**kwargs: Any) -> dict[str, Any]:
        request, principal, given = (
            kwargs.pop("request"),
            kwargs.pop("principal"),
            kwargs.pop("body"),
        )
        return await route(request, principal, given, **kwargs)

    keyword = inspect.Parameter.KEYWORD_ONLY
    endpoint.__signature__ = inspect.Signature(  # type: ignore[attr-defined]
        [
            inspect.Parameter("request", keyword, annotation=Request),
            *(inspect.Parameter(name, keyword, annotation=str) for name in in_path),
            inspect.Parameter("body", keyword, annotation=body),
            inspect.Parameter("principal", keyword, annotation=Caller),
        ]
    )
    endpoint.__name__ = endpoint.__qualname__ = kind.name.replace(" ", "_").replace("-", "_")
    router.add_api_route(
        http.path,
        endpoint,
        methods=[http.method],
        tags=[http.tag],
        status_code=http.status,
        summary=http.summary or surfaces.summary(kind),
    )
