"""The approvals commands: `waypost approvals` (list, show), `approve` and `reject` with
an approver's credential, and `groups` of approvers in the built-in directory."""

from __future__ import annotations

import json
import logging
import sys
from collections.abc import Callable
from typing import Any

import click

from waypost.client.sync import Engine
from waypost.errors import DecisionRefused, InvalidCredential
from waypost.model.records import ApprovalInfo

from .common import (
    answer_command,
    db_option,
    dump,
    echo_found,
    json_option,
    open_engine,
    record_json,
    stacked,
    tenant_option,
)
from .output import cell, facts_grid, show, table


@click.group()
def approvals() -> None:
    """Human approvals: list them, decide them."""


def _approval_json(info: ApprovalInfo) -> dict[str, Any]:
    return record_json(
        info,
        "approval_id",
        "tenant",
        "run_id",
        "step",
        "name",
        "status",
        "policy",
        "started_by",
        "expires_at",
        "created_at",
        "votes",
        "refusals",
        data=info.data,  # the workflow's value, as it is
    )


COLUMNS = ("APPROVAL ID", "STATUS", "NAME", "RUN ID", "EXPIRES", "VOTES")


def _row(a: ApprovalInfo) -> tuple[str, ...]:
    votes = ", ".join(f"{v['principal']}:{v['decision']}" for v in a.votes) or "-"
    expires = a.expires_at.isoformat(timespec="seconds") if a.expires_at else "never"
    return (a.approval_id, a.status, a.name, a.run_id, expires, votes)


@approvals.command("list")
@click.option("--as", "principal", default=None, help="Only those this user may decide now.")
@click.option(
    "--status", default="pending", show_default=True, help="pending, approved, ... or all"
)
@click.option("--run", "run_id", default=None, help="Only this run's.")
@json_option
@db_option
@tenant_option
def approvals_list(
    principal: str | None, status: str, run_id: str | None, as_json: bool, db: str, tenant: str
) -> None:
    """List approvals."""
    with open_engine(db, must_exist=True) as engine:
        found = engine.approvals(
            principal, None if status == "all" else status, tenant=tenant, run_id=run_id
        )
    echo_found(found, as_json, _approval_json, COLUMNS, _row, "no approvals")


@approvals.command("show")
@click.argument("approval_id")
@json_option
@db_option
@tenant_option
def approvals_show(approval_id: str, as_json: bool, db: str, tenant: str) -> None:
    """Show one approval: its status, policy, votes and refusals."""
    with open_engine(db, must_exist=True) as engine:
        try:
            info = engine.approval(approval_id, tenant=tenant)
        except LookupError as exc:
            raise click.ClickException(str(exc)) from exc
    shown = _approval_json(info)
    if as_json:
        click.echo(dump(shown))
        return
    facts = facts_grid()
    for name in ("approval_id", "tenant", "run_id", "step", "name", "status", "started_by"):
        facts.add_row(name, cell(shown[name]))
    facts.add_row("policy", cell(json.dumps(shown["policy"], sort_keys=True), 400))
    facts.add_row("expires_at", shown["expires_at"] or "never")
    facts.add_row("created_at", shown["created_at"])
    votes = ", ".join(f"{v.get('principal')}:{v.get('decision')}" for v in info.votes)
    facts.add_row("votes", cell(votes or "-", 400))
    facts.add_row("refusals", str(sum(int(r.get("count", 1)) for r in info.refusals)))
    show(facts)


def _decide(
    db: str, tenant: str, approval_id: str, token: str, principal: str, decision: str, comment: str
) -> None:
    # The caller gets the API's answer and nothing else: the audit log says why a
    # credential was refused, which is for the operator's log, not for whoever typed
    # the command (without a handler, Python would print warnings to stderr).
    logging.getLogger("waypost").addHandler(logging.NullHandler())
    with open_engine(db, must_exist=True) as engine:
        try:
            receipt = engine.decide(
                approval_id, token, principal, decision, comment, tenant=tenant, auth="cli"
            )
        except (InvalidCredential, DecisionRefused) as exc:
            click.echo(f"refused: {exc}", err=True)
            sys.exit(1)
    if receipt.outcome == "pending":
        click.echo(f"{decision} by {principal} counted; the approval waits for more decisions")
    else:
        click.echo(f"{decision} by {principal} counted; the approval is {receipt.outcome}")


def _decision_command(decision: str, doc: str, comment: Callable[[Any], Any]) -> click.Command:
    """`waypost approve` or `waypost reject`: the same but for the decision and how
    --comment is asked for (`comment`, the option)."""

    def run(
        approval_id: str, token: str, principal: str, comment: str, db: str, tenant: str
    ) -> None:
        _decide(db, tenant, approval_id, token, principal, decision, comment)

    run.__doc__ = doc
    command = stacked(
        run,
        click.argument("approval_id"),
        click.option("--token", required=True, help="The credential from the notification."),
        click.option("--as", "principal", required=True, help="Who you are (the approver)."),
        comment,
        db_option,
        tenant_option,
    )
    return click.command(decision)(command)


approve = _decision_command(
    "approve",
    "Approve APPROVAL_ID with your credential.",
    click.option("--comment", default="", help="Recorded with the decision."),
)
reject = _decision_command(
    "reject",
    "Reject APPROVAL_ID with your credential.",
    click.option("--comment", required=True, help="Why (recorded with the decision)."),
)


# == the built-in directory ==========================================================
@click.group()
def groups() -> None:
    """Groups of approvers in the built-in directory."""


def _members_command(
    name: str, change: Callable[..., Any], done: str, doc: str, *, must_exist: bool
) -> None:
    """`groups add` or `groups remove`: `change` GROUP's USERS, print how many changed and
    what was `done`."""

    def run(group: str, users: tuple[str, ...], db: str, tenant: str) -> None:
        with open_engine(db, must_exist=must_exist) as engine:
            changed = change(engine, group, list(users), tenant=tenant)
        click.echo(f"{changed} {done} {group} (tenant {tenant})")

    run.__doc__ = doc
    command = stacked(
        run,
        click.argument("group"),
        click.argument("users", nargs=-1, required=True),
        db_option,
        tenant_option,
    )
    groups.command(name)(command)


_members_command(
    "add",
    Engine.add_to_group,
    "added to",
    "Add USERS to GROUP (they are asked on its pending approvals).",
    must_exist=False,
)
_members_command(
    "remove",
    Engine.remove_from_group,
    "removed from",
    "Remove USERS from GROUP (their credentials on its pending approvals stop working).",
    must_exist=True,
)


def _echo_groups(found: dict[str, list[str]], as_json: bool, tenant: str) -> None:
    if as_json:
        click.echo(dump(found))
        return
    if not found:
        click.echo("no groups", err=True)
        return
    shown = table("GROUP", "MEMBERS")
    for group, members in found.items():
        shown.add_row(cell(group), cell(", ".join(members)))
    show(shown)


answer_command(
    groups,
    "list",
    "List groups and their members.",
    Engine.groups,
    _echo_groups,
    (json_option, db_option, tenant_option),
)
