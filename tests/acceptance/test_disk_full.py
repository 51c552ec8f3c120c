"""SQLite on a full disk (a real, small tmpfs): writes fail cleanly, nothing is written
half-way, and the engine carries on by itself once space is back — the outcomes it
could not record are recorded then, not after their leases lapse."""

from __future__ import annotations

import asyncio
import contextlib
import os
import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

import waypost as wp
from tests.helpers.flows import sum_of_steps
from waypost.testing import check_invariants

pytestmark = pytest.mark.timeout(180)


@contextlib.contextmanager
def small_disk(tmp_path: Path, size: str = "16m") -> Iterator[Path]:
    """A tmpfs of `size` mounted for the test (needs root)."""
    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root")
    mount = tmp_path / "disk"
    mount.mkdir()
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(mount)],
        capture_output=True,
        text=True,
    )
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {done.stderr.strip()}")
    try:
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], check=False)


def fill(folder: Path) -> Path:
    """Take every free byte of the file system under `folder`."""
    filler = folder / "filler"
    fd = os.open(filler, os.O_CREAT | os.O_WRONLY, 0o600)
    try:
        while True:
            os.write(fd, b"\0" * 65536)
    except OSError:
        pass
    try:
        while True:
            os.write(fd, b"\0" * 512)
    except OSError:
        pass
    finally:
        os.close(fd)
    return filler


@wp.activity
async def tick(ctx: wp.ActivityContext, i: int) -> int:
    await asyncio.sleep(0.005)
    return i


@wp.workflow(name="ticks")
async def ticks(ctx: wp.WorkflowContext, n: int) -> int:
    return await sum_of_steps(ctx, tick, n)


def test_a_full_disk_stops_writes_cleanly_and_the_engine_recovers_on_its_own(
    tmp_path: Path,
) -> None:
    with small_disk(tmp_path) as disk:
        url = f"sqlite:///{disk / 'full.db'}"

        async def scenario() -> None:
            late = ""
            engine = wp.AsyncEngine(url, lease=60.0, poll_interval=0.05)
            engine.register(ticks, tick)
            async with engine.running():
                runs = [await engine.start(ticks, 20, run_id=f"r{i}") for i in range(30)]
                filler = fill(disk)
                refused = None
                for _ in range(100):  # the next write that needs a page fails
                    late = f"late-{uuid.uuid4().hex[:6]}"
                    try:
                        await engine.start(ticks, 1, run_id=late)
                    except wp.StoreError as exc:
                        refused = exc
                        break
                assert refused is not None and "full" in str(refused)
                await asyncio.sleep(1.0)  # runs keep failing to record their steps meanwhile
                filler.unlink()
                results = [await r.result(timeout=30) for r in runs]  # far less than the lease
                assert results == [sum(range(20))] * 30
                after = await engine.start(ticks, 2, run_id="after")
                assert await after.result(timeout=10) == 1
            await engine.store.open()
            try:
                assert await check_invariants(engine.store) == []
                started = {r.run_id for r in await engine.store.list_runs(None, None, None, 1000)}
            finally:
                await engine.store.close()
            # The start that failed left nothing behind; every run started before is there.
            assert late not in started
            assert {r.run_id for r in runs} <= started

        asyncio.run(scenario())
