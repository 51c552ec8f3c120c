"""Tenant-defined workflows over HTTP: publish a definition, read its versions."""

from __future__ import annotations

from typing import Any

from fastapi import Request, Response

from waypost.model import operations as ops

from ..bodies import api_router
from .common import ERRORS, Caller, door

router = api_router(responses=ERRORS)


# == definitions =========================================================================
@router.post(
    "/v1/definitions",
    tags=["definitions"],
    status_code=201,
    summary="Publish a definition (YAML or JSON body) as its next version.",
    openapi_extra={
        "requestBody": {
            "required": True,
            "content": {
                "application/yaml": {"schema": {"type": "string"}},
                "application/json": {"schema": {"type": "object"}},
            },
        }
    },
    responses={200: {"description": "Identical content: the version published before."}},
)
async def publish(request: Request, response: Response, principal: Caller) -> dict[str, Any]:
    body = await request.body()
    info = await door(request, ops.Publish(definition=body), principal)
    if not info.created:
        response.status_code = 200
    return {
        "name": info.name,
        "version": info.version,
        "digest": info.digest,
        "created": info.created,
        "warnings": list(info.warnings),
    }


@router.get("/v1/definitions", tags=["definitions"], summary="Every version of every definition.")
async def list_definitions(request: Request, principal: Caller) -> dict[str, Any]:
    found = await door(request, ops.ListDefinitions(), principal)
    return {"definitions": [_definition(d) for d in found]}


@router.get("/v1/definitions/{name:id}", tags=["definitions"], summary="A definition's versions.")
async def definition_versions(request: Request, name: str, principal: Caller) -> dict[str, Any]:
    newest = await door(request, ops.GetDefinition(definition=name), principal)
    found = await door(request, ops.ListDefinitions(definition=newest.name), principal)
    return {"name": newest.name, "versions": [_definition(d) for d in found]}


@router.get(
    "/v1/definitions/{name:id}/{version}", tags=["definitions"], summary="One published version."
)
async def definition_version(
    request: Request, name: str, version: int, principal: Caller
) -> dict[str, Any]:
    info = await door(request, ops.GetDefinition(definition=name, version=version), principal)
    return _definition(info, with_body=True)


def _definition(info: Any, with_body: bool = False) -> dict[str, Any]:
    out = {
        "name": info.name,
        "version": info.version,
        "digest": info.digest,
        "published_at": info.published_at.isoformat(),
        "published_by": info.published_by,
    }
    if with_body:
        out["definition"] = info.body
        out["source"] = info.source
    return out


# == runs ================================================================================
