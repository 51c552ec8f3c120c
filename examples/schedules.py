"""Schedules: a weekday report at 09:00 Madrid time, a pulse every second, and a
backfill of last week's reports. Run it from the repository root:
    .venv/bin/python examples/schedules.py
"""

from __future__ import annotations

import sys
import time
from datetime import timedelta

import waypost as wp


@wp.workflow(name="report")
async def report(ctx: wp.WorkflowContext, region: str) -> str:
    return f"report for {region}"


def main() -> int:
    # A schedule may fire at most once a minute by default (min_schedule_interval): this
    # example lets its pulse fire every second, to be seen at once.
    quotas = wp.Quotas(min_schedule_interval=1)
    with wp.Engine("sqlite:///schedules-example.db", quotas=quotas) as engine:
        engine.register(report)
        for old in engine.schedules():  # a second run of the example starts afresh
            engine.delete_schedule(old.schedule_id)
        weekday = engine.schedule(
            report, id="weekday-report", cron="0 9 * * MON-FRI", tz="Europe/Madrid", input="emea"
        )
        print("weekday-report fires next at", weekday.to_dict()["next_fire"])
        engine.schedule(report, id="pulse", every=timedelta(seconds=1), input="all")
        with engine.running():
            # The week of the spring change: Monday 23 to Sunday 29 March 2026. A backfill
            # has an overlap policy of its own, between its own runs (allow_all: all at
            # once); the schedule's regular fires and the backfill do not see each other.
            done = engine.backfill_schedule(
                "weekday-report",
                "2026-03-23T00:00:00Z",
                "2026-03-29T23:59:59Z",
                overlap="allow_all",
            )
            for fire_at, run_id in done.fires:
                assert run_id is not None
                print(fire_at, run_id, "->", engine.result(run_id, timeout=30))
            deadline = time.monotonic() + 10
            while engine.describe_schedule("pulse").last_run_id is None:
                if time.monotonic() > deadline:
                    print("the pulse did not fire", file=sys.stderr)
                    return 1
                time.sleep(0.1)
            pulse = engine.describe_schedule("pulse").last_run_id
            assert pulse is not None
            print("pulse", pulse, "->", engine.result(pulse, timeout=30))
            engine.pause_schedule("pulse")
    return 0


if __name__ == "__main__":
    sys.exit(main())
