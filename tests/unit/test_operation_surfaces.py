"""Every operation is offered everywhere it should be, or says why not.

Each request class declares its surfaces (`call`, `http`, `remote`, `cli`, `form`); this
test walks every operation the door serves and fails when one lacks an engine method, a
route, a remote client method, a CLI command or a mention in the docs without a
`NotOffered` reason, and when a declared surface does not exist.
"""

from __future__ import annotations

import asyncio
import inspect
import pathlib
from typing import Any

import click
import pytest

from waypost.cli.main import main
from waypost.client.engine import AsyncEngine
from waypost.client.remote import AsyncClient, Client
from waypost.client.sync import Engine
from waypost.errors import InvalidRequest
from waypost.model import surfaces
from waypost.model.requests import Cli, Http, NotOffered, Request, Resource
from waypost.model.schedules import DeleteSchedule, GetSchedule, ListSchedules, PauseSchedule
from waypost.server.api import ROUTERS
from waypost.server.console.commands import COMMANDS

OPERATIONS = surfaces.EVERY_OPERATION
DOCS = "\n".join(
    p.read_text()
    for p in [
        *pathlib.Path(__file__).parents[2].joinpath("docs").rglob("*.md"),
        pathlib.Path(__file__).parents[2] / "README.md",
    ]
)


def _id(kind: type[Request[Any]]) -> str:
    return kind.__name__


def _routes() -> set[tuple[str, str]]:
    return {(m, r.path) for router in ROUTERS for r in router.routes for m in r.methods}


def _command(path: str) -> click.Command | None:
    command: click.Command = main
    for part in path.split():
        if not isinstance(command, click.Group) or part not in command.commands:
            return None
        command = command.commands[part]
    return command


def _reason(surface: object) -> bool:
    return isinstance(surface, NotOffered) and len(surface.why) > 10


def _offered(kind: type[Request[Any]], surface: str) -> Any:
    """The declared `surface` of `kind`, or None where it is `NotOffered` with a reason;
    a surface left undeclared fails."""
    declared = getattr(kind, surface)
    assert declared is not None, f"{kind.__name__} declares no {surface}"
    if isinstance(declared, NotOffered):
        assert _reason(declared)
        return None
    return declared


def test_every_operation_the_engine_serves_is_listed(tmp_path: pathlib.Path) -> None:
    door = AsyncEngine(f"sqlite:///{tmp_path}/surfaces.db")._door
    assert set(door.operations()) == set(OPERATIONS)


@pytest.mark.parametrize("kind", OPERATIONS, ids=_id)
def test_an_operation_has_an_engine_method_and_its_blocking_twin(kind: type[Request[Any]]) -> None:
    call = _offered(kind, "call")
    if call is None:
        return
    assert callable(getattr(AsyncEngine, call, None)), f"AsyncEngine.{call} is missing"
    assert callable(getattr(Engine, call, None)), f"Engine.{call} is missing"


@pytest.mark.parametrize("kind", OPERATIONS, ids=_id)
def test_an_operation_has_a_route(kind: type[Request[Any]]) -> None:
    http = _offered(kind, "http")
    if http is None:
        return
    assert (http.method, http.path) in _routes(), f"no route {http}"


@pytest.mark.parametrize("kind", OPERATIONS, ids=_id)
def test_an_operation_with_a_route_has_a_remote_method(kind: type[Request[Any]]) -> None:
    if not isinstance(kind.http, Http):
        return
    name = kind.remote if kind.remote is not None else kind.call
    if isinstance(name, NotOffered):
        assert _reason(name)
        return
    assert isinstance(name, str)
    assert callable(getattr(AsyncClient, name, None)), f"AsyncClient.{name} is missing"
    assert callable(getattr(Client, name, None)), f"Client.{name} is missing"


@pytest.mark.parametrize("kind", OPERATIONS, ids=_id)
def test_an_operation_has_a_cli_command(kind: type[Request[Any]]) -> None:
    if _offered(kind, "cli") is None:
        return
    assert isinstance(kind.cli, Cli)
    assert _command(kind.cli.command) is not None, f"no command `waypost {kind.cli.command}`"


@pytest.mark.parametrize("kind", OPERATIONS, ids=_id)
def test_an_operation_is_in_the_docs(kind: type[Request[Any]]) -> None:
    names = [kind.call if isinstance(kind.call, str) else f"`{kind.__name__}`"]
    if isinstance(kind.cli, Cli):
        names.append(f"waypost {kind.cli.command}")
    if isinstance(kind.http, Http):
        names.append(kind.http.path.replace(":id", ""))
    assert any(name in DOCS for name in names), f"the docs name none of {names}"


def test_the_derived_surfaces_are_made_for_every_declaration() -> None:
    for kind in surfaces.derived_http():
        assert isinstance(kind.http, Http)
        assert (kind.http.method, kind.http.path) in _routes()
        name = kind.remote if kind.remote is not None else kind.call
        assert getattr(AsyncClient, str(name)).__wrapped__ is getattr(AsyncEngine, str(name))
    for kind in surfaces.derived_cli():
        assert isinstance(kind.cli, Cli)
        assert _command(kind.cli.command) is not None
    assert {c.request for c in COMMANDS.values()} >= set(surfaces.forms())


def test_a_remote_twin_takes_no_tenant_and_checks_before_sending() -> None:
    async def calls() -> None:
        async with AsyncClient("http://127.0.0.1:9", "key") as client:  # nothing listens there
            with pytest.raises(TypeError, match="API key decides"):
                await client.pause("r1", "why", tenant="other")
            with pytest.raises(InvalidRequest, match="reason"):
                await client.pause("r1", "")

    asyncio.run(calls())
    assert "tenant" not in inspect.signature(AsyncClient.pause).parameters


def test_a_resource_makes_the_surfaces_of_its_verbs_but_those_a_request_declares() -> None:
    things = Resource("thing", "/v1/things", key="thing_id", group="stuff")
    assert things.surfaces("create") == {
        "name": "create thing",
        "call": "create_thing",
        "http": Http("POST", "/v1/things", status=201, tag="stuff"),
        "cli": Cli("stuff create"),
    }
    assert things.surfaces("list")["name"] == "list things"
    assert things.surfaces("get")["cli"] == Cli("stuff show")
    assert things.surfaces("delete")["http"] == Http(
        "DELETE", "/v1/things/{thing_id:id}", tag="stuff"
    )
    assert things.surfaces("pause")["http"] == Http(
        "POST", "/v1/things/{thing_id:id}/pause", tag="stuff"
    )
    assert (PauseSchedule.name, PauseSchedule.call) == ("pause schedule", "pause_schedule")
    assert PauseSchedule.http == Http(
        "POST", "/v1/schedules/{schedule_id:id}/pause", tag="schedules"
    )
    assert DeleteSchedule.cli == Cli("schedules delete")
    assert (ListSchedules.call, GetSchedule.call) == ("schedules", "describe_schedule")
    assert GetSchedule.name == "get schedule"
    with pytest.raises(TypeError, match="a verb without a resource"):

        class Loose(Request[None], verb="pause"):
            pass
