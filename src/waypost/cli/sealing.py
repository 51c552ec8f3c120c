"""`waypost runs seal-legacy`: runs written before histories and rows were bound to their
run, bound by a key holder (decision 0030).

The chain key comes from the environment (`WAYPOST_CHAIN_KEYS` or
`WAYPOST_CHAIN_KEYS_FILE`). `--all` walks the tenant's runs in batches (one transaction
per run), printing a progress line per batch and each run left as it is on stderr, and
the totals on stdout; it exits 1 if any run was left as it is.
"""

from __future__ import annotations

import json
import sys

import click

from .common import check_run_or_all, open_engine, run_or_all_options

BATCH = 200


@click.command("seal-legacy")
@run_or_all_options("sealed")
def runs_seal_legacy(
    run_id: str | None, all_runs: bool, dry_run: bool, as_json: bool, db: str, tenant: str
) -> None:
    """Bind runs written before histories and rows were bound to their run: each history
    hashed again from its run's genesis under the current key of WAYPOST_CHAIN_KEYS, and
    a check on each run's and approval's row that has none. A run whose history or rows
    do not verify even as legacy ones is left as it is and named (exit 1): an operator
    must look at it. Run once after upgrading, then unset WAYPOST_CHAIN_ACCEPT_LEGACY."""
    check_run_or_all(run_id, all_runs)
    runs = rehashed = rows = 0
    refused: dict[str, str] = {}
    with open_engine(db, must_exist=True) as engine:
        after: str | None = None
        batch = 0
        while True:
            if run_id is not None:
                report = engine.seal_legacy(run_id, dry_run=dry_run, tenant=tenant)
            else:
                report = engine.seal_legacy(
                    after=after, limit=BATCH, dry_run=dry_run, tenant=tenant
                )
            batch += 1
            runs += report.runs
            rehashed += report.rehashed
            rows += report.rows
            refused.update(report.refused)
            for rid, why in report.refused.items():
                click.echo(f"run {rid}: left as it is: {why}", err=True)
            if run_id is not None:
                break
            click.echo(f"batch {batch}: {report.runs} runs ({runs} runs so far)", err=True)
            after = report.next_after
            if after is None:
                break
    if as_json:
        totals = {
            "tenant": tenant,
            "dry_run": dry_run,
            "runs": runs,
            "rehashed": rehashed,
            "rows": rows,
            "refused": refused,
        }
        click.echo(json.dumps(totals, sort_keys=True))
    else:
        verb = "would seal" if dry_run else "sealed"
        click.echo(
            f"{verb} {rehashed} histories and {rows} rows in {runs} runs of tenant {tenant}"
            + (f"; {len(refused)} runs left as they are" if refused else "")
        )
    if refused:
        sys.exit(1)
