"""Definitions in the console: their names and versions, a version's graph and
canonical text, two versions side by side, and publishing a new version from a file.

Everything goes through the door as the session's principal: `ListDefinitions` and
`GetDefinition` to read (readers), `Publish` to publish (operators). A definition
the validator refuses is shown back with every located problem (`steps.x.next:
...`), and nothing is published. The uploaded file is bounded twice: by the
server's request body limit, and here by the definition size limit (`Limits`)
before the validator reads it.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any
from urllib.parse import quote

from fastapi import APIRouter, Request
from fastapi.responses import RedirectResponse, Response
from markupsafe import Markup
from starlette.datastructures import UploadFile

from waypost.errors import WaypostError
from waypost.model import operations as ops
from waypost.model.definitions import DefinitionError, Limits
from waypost.model.identity import preview

from .diff import canonical_yaml, side_by_side
from .graph import render_graph
from .pages import (
    CSRF_REFUSED,
    Visit,
    engine_of,
    forbidden,
    genuine,
    not_shown,
    page,
    query_of,
    refusal,
    signed_in,
)

router = APIRouter(include_in_schema=False)

MAX_FILE = Limits().max_definition_bytes
"""The largest definition file read, in bytes (the validator's own limit)."""


def _query(request: Request) -> dict[str, str]:
    try:
        return query_of(request)
    except WaypostError:
        return {}  # an address that is not UTF-8: as if it asked for nothing in particular


def _version(text: str | None) -> int | None:
    if text is None or not text.isascii() or not text.isdigit() or len(text) > 9:
        return None
    return int(text)


async def _versions(
    request: Request, visit: Visit, name: str | None = None
) -> dict[str, list[Any]]:
    """Every published version (or only `name`'s) by definition name, newest first."""
    asked = ops.ListDefinitions(definition=name)
    found = await engine_of(request).execute(asked, visit.principal)
    by_name: dict[str, list[Any]] = defaultdict(list)
    for info in found:
        by_name[info.name].append(info)
    return {
        name: sorted(infos, key=lambda i: i.version, reverse=True)
        for name, infos in sorted(by_name.items())
    }


@router.get("/definitions")
async def definitions_page(request: Request) -> Response:
    visit = await signed_in(request)
    try:
        versions = await _versions(request, visit)
    except WaypostError as exc:
        return not_shown(visit, exc, "Definitions not shown")
    return page(
        "console/definitions.html", visit, nav="definitions", versions=versions, problems=[]
    )


@router.get("/definitions/{name:id}")
async def definition_page(request: Request, name: str) -> Response:
    """A definition: its versions, one version's graph and text (`?version=N`, newest
    by default), and the form that compares two versions."""
    visit = await signed_in(request)
    version = _version(_query(request).get("version"))
    engine = engine_of(request)
    try:
        shown = await engine.execute(
            ops.GetDefinition(definition=name, version=version), visit.principal
        )
        versions = (await _versions(request, visit, shown.name)).get(shown.name, [shown])
    except WaypostError as exc:
        return not_shown(visit, exc, "Definition not shown")
    graph = Markup(render_graph(shown.body, title=f"{shown.name} v{shown.version}"))
    notice = {
        "1": f"Published as version {shown.version}.",
        "0": f"The same content is version {shown.version} already: nothing new was published.",
    }.get(_query(request).get("published", ""), "")
    return page(
        "console/definition.html",
        visit,
        nav="definitions",
        notice=notice,
        shown=shown,
        versions=versions,
        graph=graph,
        text=canonical_yaml(shown.body),
    )


@router.get("/definitions/{name:id}/diff")
async def diff_page(request: Request, name: str) -> Response:
    """Two versions side by side (`?old=N&new=M`; by default the two newest)."""
    visit = await signed_in(request)
    engine = engine_of(request)
    try:
        versions = (await _versions(request, visit, name)).get(name)
        if not versions:
            # The door's own answer for a name it does not know (a 404).
            await engine.execute(ops.GetDefinition(definition=name), visit.principal)
            return _missing(visit, name)
        numbers = [v.version for v in versions]
        new = _version(_query(request).get("new")) or numbers[0]
        old = _version(_query(request).get("old")) or (
            numbers[1] if len(numbers) > 1 else numbers[0]
        )
        left, right = [
            await engine.execute(ops.GetDefinition(definition=name, version=v), visit.principal)
            for v in (old, new)
        ]
    except WaypostError as exc:
        return not_shown(visit, exc, "Versions not compared")
    rows = side_by_side(canonical_yaml(left.body), canonical_yaml(right.body))
    return page(
        "console/definition_diff.html",
        visit,
        nav="definitions",
        definition=name,
        left=left,
        right=right,
        rows=rows,
        versions=versions,
        same=left.digest == right.digest,
    )


def _missing(visit: Visit, name: str) -> Response:
    message = f"There is no definition {preview(name)}."
    title = "No such definition"
    return page("console/message.html", visit, status=404, title=title, message=message)


@router.post("/definitions")
async def publish(request: Request) -> Response:
    """Publish the uploaded file (`file`) as a new version: on success, to its page;
    refused, the definitions page again with the door's answer (the validator's
    located problems for an invalid definition) and nothing published."""
    visit = await signed_in(request)
    # One file and a few fields; the form closes the uploaded file's spool, whatever happens.
    async with request.form(max_files=1, max_fields=10) as form:
        if not genuine(request, visit, form):
            return forbidden(visit, CSRF_REFUSED)
        upload = form.get("file")
        body: bytes | None = None
        problem = ""
        if not isinstance(upload, UploadFile) or not upload.filename:
            problem = "Choose a definition file (YAML or JSON) to publish."
        else:
            body = await upload.read(MAX_FILE + 1)
            if not body.strip():
                problem = f"The file {preview(upload.filename)} is empty."
            elif len(body) > MAX_FILE:
                problem = f"The file is over {MAX_FILE} bytes, the most a definition may have."
    status, problems = 422, []
    if body is not None and not problem:
        try:
            info = await engine_of(request).execute(ops.Publish(definition=body), visit.principal)
        except DefinitionError as exc:
            problem = "Not published: the definition is invalid."
            problems = [{"path": p.path, "message": p.message} for p in exc.problems[:200]]
        except WaypostError as exc:
            status, message = refusal(exc)
            problem = f"Not published. {message}"
        else:
            target = f"/definitions/{quote(info.name, safe='')}?version={info.version}"
            target += "&published=1" if info.created else "&published=0"
            return RedirectResponse(target, status_code=303)
    try:
        versions = await _versions(request, visit)
    except WaypostError:
        versions = {}
    return page(
        "console/definitions.html",
        visit,
        status=status,
        nav="definitions",
        versions=versions,
        problems=problems,
        notice=problem,
        notice_kind="bad",
    )
