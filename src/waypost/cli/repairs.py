"""`waypost runs retry|skip|update-input RUN_ID --reason ...`: repairing runs.

Each calls the engine method of the same name (the one door: the same checks, roles
and errors as from Python and HTTP) and prints one line saying what was done.
"""

from __future__ import annotations

import json
from typing import Any

import click

from .common import db_option, open_engine, tenant_option

_reason = click.option("--reason", required=True, help="Why (recorded in the run's history).")


def _json(text: str, name: str) -> Any:
    try:
        return json.loads(text)
    except RecursionError:
        raise click.BadParameter("not JSON: nested too deeply", param_hint=name) from None
    except ValueError as exc:
        raise click.BadParameter(f"not JSON: {exc}", param_hint=name) from None


@click.command("retry")
@click.argument("run_id")
@_reason
@click.option("--step", default=None, help="The failed step (its id or definition step name).")
@db_option
@tenant_option
def runs_retry(run_id: str, reason: str, step: str | None, db: str, tenant: str) -> None:
    """Re-run a failed run from its failed step (earlier results are kept)."""
    with open_engine(db, must_exist=True) as engine:
        engine.retry(run_id, reason, step=step, tenant=tenant)
    click.echo(f"{run_id} retried: its failed step runs again")


@click.command("skip")
@click.argument("run_id")
@click.option("--step", required=True, help="The step (its id or definition step name).")
@_reason
@click.option("--output", default="null", help="The step's output instead (JSON).")
@db_option
@tenant_option
def runs_skip(run_id: str, step: str, reason: str, output: str, db: str, tenant: str) -> None:
    """Mark a failed, waiting or running step skipped, with the output to use instead."""
    value = _json(output, "--output")
    with open_engine(db, must_exist=True) as engine:
        engine.skip(run_id, step, reason, output=value, tenant=tenant)
    click.echo(f"{run_id} step {step} skipped")


@click.command("update-input")
@click.argument("run_id")
@click.option("--data", "data", required=True, help="The fields to replace (a JSON object).")
@_reason
@db_option
@tenant_option
def runs_update_input(run_id: str, data: str, reason: str, db: str, tenant: str) -> None:
    """Replace fields of a waiting definition run's data (old and new are recorded)."""
    value = _json(data, "--data")
    if not isinstance(value, dict):
        raise click.BadParameter("a JSON object", param_hint="--data")
    with open_engine(db, must_exist=True) as engine:
        engine.update_input(run_id, value, reason, tenant=tenant)
    click.echo(f"{run_id} input updated: {', '.join(sorted(value))}")
