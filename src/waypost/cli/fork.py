"""`waypost runs fork`: a new, linked run from a run's history up to a step."""

from __future__ import annotations

import click

from waypost.model.wire import to_wire

from .common import (
    db_option,
    dump,
    open_engine,
    output_option,
    tenant_option,
)


@click.command("fork")
@click.argument("run_id")
@click.option("--reason", required=True, help="Why (recorded in both runs' histories).")
@click.option("--at", "at_step", default=None, help="Fork before this step (it runs again).")
@click.option(
    "--seq", type=click.IntRange(1), default=None, help="Fork after this event of the run."
)
@click.option("--new-id", "new_id", default=None, help="The new run's id (default: a new one).")
@output_option("Print the fork as JSON.")
@db_option
@tenant_option
def runs_fork(
    run_id: str,
    reason: str,
    at_step: str | None,
    seq: int | None,
    new_id: str | None,
    as_json: bool,
    db: str,
    tenant: str,
) -> None:
    """Start a new run from RUN_ID's history up to a step: the steps finished before it
    are reused, not run again; that step and everything after run anew. Prints the new
    run's id."""
    if at_step is not None and seq is not None:
        raise click.UsageError("give --at or --seq, not both")
    with open_engine(db, must_exist=True) as engine:
        forked = engine.fork(
            run_id,
            reason=reason,
            at_step=at_step,
            up_to_seq=seq,
            new_run_id=new_id,
            tenant=tenant,
        )
    if as_json:
        click.echo(dump(to_wire(forked)))
    else:
        click.echo(forked.run_id)
