"""`waypost runs query` and `waypost runs update`: ask a run's code, or update it.

Both replay the run's code here, so they need the modules that define it
(`--app`; a published definition needs none). The answer is printed as JSON.
"""

from __future__ import annotations

from typing import Any

import click

from waypost.runtime.registry import items_in_modules

from .common import app_option, db_option, dump, json_value, open_engine, tenant_option

_app_option = app_option(
    "Module defining the run's workflow (repeatable; not needed for a definition run)."
)
_arg_option = click.option(
    "--arg",
    "args",
    multiple=True,
    help="An argument of the handler, as JSON (repeatable, in order).",
)


def _json_args(texts: tuple[str, ...]) -> list[Any]:
    return [json_value(text, f"--arg #{i}") for i, text in enumerate(texts, 1)]


@click.command("query")
@click.argument("run_id")
@click.argument("name")
@_arg_option
@_app_option
@db_option
@tenant_option
def runs_query(
    run_id: str, name: str, args: tuple[str, ...], apps: tuple[str, ...], db: str, tenant: str
) -> None:
    """Print what query NAME of run RUN_ID answers (nothing is recorded)."""
    values = _json_args(args)
    with open_engine(db, must_exist=True) as engine:
        engine.register(*items_in_modules(apps))
        answer = engine.query(run_id, name, *values, tenant=tenant)
    click.echo(dump(answer))


@click.command("update")
@click.argument("run_id")
@click.argument("name")
@_arg_option
@click.option("--update-id", default=None, help="Deduplicates: the same id answers the same.")
@click.option(
    "--timeout",
    type=click.FloatRange(0, 3600, min_open=True),
    default=60.0,
    show_default=True,
    help="Seconds to wait for the update's result.",
)
@_app_option
@db_option
@tenant_option
def runs_update(
    run_id: str,
    name: str,
    args: tuple[str, ...],
    update_id: str | None,
    timeout: float,
    apps: tuple[str, ...],
    db: str,
    tenant: str,
) -> None:
    """Send update NAME to run RUN_ID and print its result (a worker runs its handler).

    Its validator runs here first: a refusal records nothing (exit 1)."""
    values = _json_args(args)
    with open_engine(db, must_exist=True) as engine:
        engine.register(*items_in_modules(apps))
        answer = engine.update(
            run_id, name, *values, update_id=update_id, timeout=timeout, tenant=tenant
        )
    click.echo(dump(answer))
