"""The CLI commands made from requests' declarations (`Cli(..., derived=True)`).

The fields its route's path names become arguments (`RUN_ID`), the others options
(`--step`; a required field a required option; a JSON field parsed, an object field
refused unless it is a JSON object); the command builds the request, hands it to the
engine's one door as the local principal and prints its declaration's `done` line.
"""

from __future__ import annotations

from typing import Any

import click

from waypost.model import surfaces
from waypost.model.requests import Cli, Request as Operation

from .common import db_option, json_value, open_engine, tenant_option


def add_derived_commands(root: click.Group) -> None:
    """Add every derived command to its group under `root` (`runs pause` to `runs`)."""
    for kind in surfaces.derived_cli():
        cli = kind.cli
        assert isinstance(cli, Cli)
        *groups, name = cli.command.split()
        group = root
        for part in groups:
            found = group.commands[part]
            assert isinstance(found, click.Group)
            group = found
        group.add_command(_command(kind, cli, name))


def _command(kind: type[Operation[Any]], cli: Cli, name: str) -> click.Command:
    fields = surfaces.fields_of(kind)
    in_path = set(surfaces.path_fields(kind))

    def run(db: str, tenant: str, **given: Any) -> None:
        values = {}
        for f in fields:
            value = given[f.name]
            if f.json and value is not None:
                value = _json(value, f"--{_option(f.name)}", object=f.type is not Any)
            values[f.name] = value
        request = kind(**values)
        with open_engine(db, must_exist=True) as engine:
            engine.execute(request, engine.local(tenant))
        if cli.done is not None:
            click.echo(cli.done(request))

    params: list[click.Parameter] = []
    for f in fields:
        if f.name in in_path:
            params.append(click.Argument([f.name]))
        else:
            params.append(
                click.Option(
                    [f"--{_option(f.name)}", f.name],
                    required=f.required,
                    default=None,
                    help=f.doc + (" (JSON)" if f.json and "JSON" not in f.doc else ""),
                )
            )
    command = click.Command(name, callback=run, params=params, help=surfaces.summary(kind))
    return tenant_option(db_option(command))


def _option(field: str) -> str:
    return field.replace("_", "-")


def _json(text: str, name: str, *, object: bool) -> Any:
    value = json_value(text, name)
    if object and not isinstance(value, dict):
        raise click.BadParameter("a JSON object", param_hint=name)
    return value
