"""The `waypost users` commands: the console's users of a tenant.

A password is never an argument (argv is visible to other users of the machine and
kept in shell histories): it is read from a prompt, typed twice, or from the first
line of stdin with `--password-stdin`.
"""

from __future__ import annotations

import sys

import click

from waypost.client.sync import Engine
from waypost.model.users import UserInfo

from .common import (
    db_option,
    json_option,
    list_command,
    open_engine,
    role_names,
    roles_option,
)

tenant_option = click.option("--tenant", required=True, help="The tenant of the users.")
password_stdin_option = click.option(
    "--password-stdin",
    is_flag=True,
    help="Read the password from the first line of stdin instead of a prompt.",
)


def read_password(from_stdin: bool) -> str:
    if from_stdin:
        line = sys.stdin.readline()
        return line[:-1] if line.endswith("\n") else line
    password: str = click.prompt("Password", hide_input=True, confirmation_prompt=True)
    return password


@click.group()
def users() -> None:
    """Console users: who signs in to the web console with a name and password."""


@users.command("create")
@tenant_option
@click.option("--name", required=True, help="The user's name (what they sign in with).")
@roles_option
@password_stdin_option
@db_option
def users_create(tenant: str, name: str, roles: str, password_stdin: bool, db: str) -> None:
    """Make a console user (only an argon2id hash of the password is kept)."""
    password = read_password(password_stdin)
    with open_engine(db, must_exist=True) as engine:
        made = engine.create_user(name, role_names(roles), password, tenant=tenant)
    click.echo(
        f"user {made.name} in tenant {made.tenant} ({', '.join(r.value for r in made.roles)})"
    )


def _row(user: UserInfo) -> tuple[str, ...]:
    state = "disabled" if user.disabled else "active"
    return (user.name, state, ",".join(r.value for r in user.roles))


list_command(
    users,
    "List the console users of a tenant.",
    Engine.list_users,
    ("NAME", "STATUS", "ROLES"),
    _row,
    to_json=UserInfo.to_json,
    none="no users in tenant {tenant}",
    options=(tenant_option, json_option, db_option),
)


@users.command("disable")
@click.argument("name")
@tenant_option
@click.option("--reason", default="", help="Why (logged).")
@db_option
def users_disable(name: str, tenant: str, reason: str, db: str) -> None:
    """Disable user NAME: it cannot sign in, and its sessions end at once."""
    with open_engine(db, must_exist=True) as engine:
        engine.disable_user(name, reason, tenant=tenant)
    click.echo(f"user {name} disabled")


@users.command("set-password")
@click.argument("name")
@tenant_option
@password_stdin_option
@db_option
def users_set_password(name: str, tenant: str, password_stdin: bool, db: str) -> None:
    """Replace user NAME's password; its sessions end."""
    password = read_password(password_stdin)
    with open_engine(db, must_exist=True) as engine:
        engine.set_password(name, password, tenant=tenant)
    click.echo(f"password of {name} set")
