"""Engines on one SQLite file wake each other when one leaves work for another.

The engine serving the workflow polls only every 120 s here: a run started or
signalled by another engine still moves at once, because the commit that left the
work sends a wake-up to the file's other engines.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path
from typing import Any

import pytest

import waypost as wp
from waypost.store.wakeups import folder_for

pytestmark = pytest.mark.timeout(120)


@wp.activity(name="wake.double")
def double(ctx: wp.ActivityContext, n: int) -> int:
    return 2 * n


@wp.workflow(name="wake.flow", version="1")
async def flow(ctx: wp.WorkflowContext, n: int) -> int:
    doubled: int = await ctx.run(double, n)
    extra = await ctx.wait_signal("more")
    return doubled + int(extra)


def test_a_run_started_and_signalled_elsewhere_moves_without_waiting_for_a_poll(
    sqlite_url: str,
) -> None:
    slow = {"poll_interval": 120.0, "lease": 5.0, "shutdown_grace": 5.0}
    served = wp.Engine(sqlite_url, **slow)
    served.register(flow, double)
    caller = wp.Engine(sqlite_url, **slow)  # serves nothing: the run is the other's
    try:
        with served.running():
            run = caller.start("wake.flow", 4)
            eventually_waiting(caller, run.run_id)
            caller.signal(run.run_id, "more", 1)
            assert caller.result(run.run_id, timeout=30) == 9
    finally:
        for engine in (caller, served):
            engine.close()


def eventually_waiting(engine: wp.Engine, run_id: str) -> None:
    from tests.helpers import eventually

    eventually(lambda: engine.get(run_id).status == "waiting", "the run to wait", timeout=30)


def test_the_sockets_live_in_a_folder_of_this_users_only(sqlite_url: str) -> None:
    engine = wp.Engine(sqlite_url)
    path = sqlite_url.removeprefix("sqlite:///")
    folder = folder_for(path)
    try:
        with engine.running():
            from tests.helpers import eventually

            socks: Any = eventually(
                lambda: [n for n in os.listdir(folder) if n.endswith(".sock")], "a socket"
            )
            assert len(socks) == 1
            mode = os.lstat(folder).st_mode
            assert stat.S_ISDIR(mode) and mode & 0o077 == 0
    finally:
        engine.close()
    assert not os.path.exists(folder)  # the last engine on the file removed it


def test_a_folder_others_can_write_is_not_used(tmp_path: Path, caplog: Any) -> None:
    path = tmp_path / "shared.db"
    folder = folder_for(str(path))
    os.makedirs(folder, exist_ok=True)
    os.chmod(folder, 0o777)
    engine = wp.Engine(f"sqlite:///{path}", poll_interval=0.05)
    engine.register(flow, double)
    try:
        with engine.running():
            run = engine.start("wake.flow", 1)
            engine.signal(run.run_id, "more", 1)
            assert engine.result(run.run_id, timeout=30) == 3  # polling still finds the work
        assert "is not a folder of this user's only" in caplog.text
        assert not [n for n in os.listdir(folder) if n.endswith(".sock")]
    finally:
        engine.close()
        os.rmdir(folder)
