"""Every `waypost` command that prints records offers --output table|json (and --json, its
alias); every other command is named here with what it prints instead.

A new command fails this test until it is one or the other: the choice is made once,
when the command is written, not found missing by a user.
"""

from __future__ import annotations

from collections.abc import Iterator

import click

from waypost.cli.main import main

# Commands that print no records, and what they print instead.
NO_RECORDS = {
    "approve": "the decision, in words",
    "reject": "the decision, in words",
    "cancel": "that the run was asked to cancel",
    "signal": "that the signal was sent",
    "start": "the run id",
    "runs start": "the run id",
    "db migrate": "that the schema is up to date",
    "definitions publish": "the version published",
    "definitions schema": "the JSON Schema of definitions (a document, not records)",
    "definitions validate": "whether the file is valid, and its problems",
    "demo": "the demo's story",
    "server": "nothing on stdout: it serves until stopped",
    "worker": "nothing on stdout: it serves until stopped",
    "groups add": "who was added",
    "groups remove": "who was removed",
    "keys create": "the new key's secret, once",
    "keys revoke": "that the key was revoked",
    "runs pause": "what was done to the run",
    "runs resume": "what was done to the run",
    "runs retry": "what was done to the run",
    "runs skip": "what was done to the run (its --output is the skipped step's value)",
    "runs terminate": "what was done to the run",
    "runs update-input": "what was done to the run",
    "runs purge": "its progress and totals",
    "runs query": "the query's answer, the workflow's own JSON value",
    "runs update": "the update's answer, the workflow's own JSON value",
    "runs verify": "the problems found in the run's chain, or that it is intact",
    "schedules delete": "that the schedule was deleted",
    "schedules pause": "the schedule's line",
    "schedules resume": "the schedule's line",
    "tenants create": "that the tenant was created",
    "tenants delete": "what was deleted",
    "tenants disable": "that the tenant was disabled",
    "tenants enable": "that the tenant was enabled",
    "users create": "that the user was created",
    "users disable": "that the user was disabled",
    "users set-password": "that the password was set",
    "webhooks create": "the source's secret, once",
    "webhooks delete": "that the source was deleted",
}


def commands(group: click.Group, path: str = "") -> Iterator[tuple[str, click.Command]]:
    for name, command in sorted(group.commands.items()):
        full = f"{path} {name}".strip()
        if isinstance(command, click.Group):
            yield from commands(command, full)
        else:
            yield full, command


def options(command: click.Command) -> dict[str, click.Option]:
    return {name: p for p in command.params if isinstance(p, click.Option) for name in p.opts}


def test_every_command_that_prints_records_has_output_and_json() -> None:
    missing, unnamed = [], []
    for path, command in commands(main):
        given = options(command)
        if path in NO_RECORDS:
            continue
        if "--output" not in given or "--json" not in given:
            missing.append(path)
            continue
        output = given["--output"]
        if not (
            isinstance(output.type, click.Choice) and list(output.type.choices) == ["table", "json"]
        ):
            unnamed.append(path)
    assert missing == [], f"commands without --output table|json and --json: {missing}"
    assert unnamed == [], f"--output of these is not table|json: {unnamed}"


def test_the_commands_named_as_printing_no_records_exist_and_have_no_json() -> None:
    known = dict(commands(main))
    assert sorted(set(NO_RECORDS) - set(known)) == []
    with_json = [path for path in NO_RECORDS if "--json" in options(known[path])]
    assert with_json == []
