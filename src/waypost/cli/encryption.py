"""`waypost runs re-encrypt`: stored payloads moved to the current encryption key.

The keys come from the environment (`WAYPOST_ENCRYPTION_KEYS=k2:base64,k1:base64`,
the first is current, or `WAYPOST_ENCRYPTION_KEYS_FILE`). `--all` walks the
tenant's runs in batches (one transaction per run) after re-sealing the inputs of its
schedules, printing a progress line per
batch on stderr and the totals on stdout.
"""

from __future__ import annotations

import json

import click

from waypost.model.operations import ReEncryptReport

from .common import check_run_or_all, open_engine, run_or_all_options

BATCH = 200


def _words(
    report: ReEncryptReport, runs: int, values: int, resealed: int, schedules: tuple[int, int]
) -> str:
    verb = "would re-encrypt" if report.dry_run else "re-encrypted"
    found, sealed = schedules
    of_schedules = f" and {sealed} of {found} schedule inputs" if found else ""
    return (
        f"{verb} {resealed} of {values} payloads in {runs} runs{of_schedules} of tenant "
        f"{report.tenant} under key {report.key!r}"
    )


@click.command("re-encrypt")
@run_or_all_options("re-encrypted")
def runs_reencrypt(
    run_id: str | None, all_runs: bool, dry_run: bool, as_json: bool, db: str, tenant: str
) -> None:
    """Re-encrypt stored payloads (inputs, results, signals, activity arguments and
    results; with --all, the inputs of the tenant's schedules and the secrets of its
    webhook sources too) under the current
    key of WAYPOST_ENCRYPTION_KEYS, so that older keys can be retired. The history's
    hashes do not change: `runs verify` still passes."""
    check_run_or_all(run_id, all_runs)
    with open_engine(db, must_exist=True) as engine:
        if run_id is not None:
            report = engine.reencrypt(run_id, dry_run=dry_run, tenant=tenant)
            runs, values, resealed = report.runs, report.values, report.resealed
            schedules = (0, 0)
            sources = (0, 0)
        else:
            runs = values = resealed = 0
            after: str | None = None
            batch = 0
            while True:
                report = engine.reencrypt(after=after, limit=BATCH, dry_run=dry_run, tenant=tenant)
                if batch == 0:  # the first batch re-seals schedules' inputs, webhook secrets
                    schedules = (report.schedules, report.schedules_resealed)
                    sources = (report.webhook_sources, report.webhook_secrets_resealed)
                batch += 1
                runs += report.runs
                values += report.values
                resealed += report.resealed
                click.echo(
                    f"batch {batch}: {report.runs} runs, {report.resealed} payloads "
                    f"({runs} runs so far)",
                    err=True,
                )
                after = report.next_after
                if after is None:
                    break
    if as_json:
        totals = {
            "tenant": report.tenant,
            "key": report.key,
            "dry_run": report.dry_run,
            "runs": runs,
            "values": values,
            "resealed": resealed,
            "schedules": schedules[0],
            "schedules_resealed": schedules[1],
            "webhook_sources": sources[0],
            "webhook_secrets_resealed": sources[1],
        }
        click.echo(json.dumps(totals, sort_keys=True))
    else:
        click.echo(_words(report, runs, values, resealed, schedules))
