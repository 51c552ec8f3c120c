"""Files that hold secrets are created for their owner only, and never through a symlink.

The SQLite database (with its -wal and -shm files) holds definitions, histories and
credential hashes; the FileSender's file holds approval tokens. A symbolic link
planted where such a file will be created must not redirect it.
"""

from __future__ import annotations

import json
import os
import stat
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import waypost as wp
from tests.helpers import eventually
from tests.helpers.mail import approval_notification
from waypost.features.senders import FileSender

pytestmark = pytest.mark.timeout(120)


@pytest.fixture
def loose_umask() -> Iterator[None]:
    """A umask that lets new files be read by everybody, as many systems have."""
    old = os.umask(0o022)
    try:
        yield
    finally:
        os.umask(old)


def mode(path: Path) -> int:
    return stat.S_IMODE(os.lstat(path).st_mode)


@wp.workflow(name="hello")
async def hello(ctx: wp.WorkflowContext, who: str) -> str:
    return f"hello {who}"


def test_a_new_sqlite_database_and_its_wal_and_shm_files_are_owner_only(
    tmp_path: Path, loose_umask: None
) -> None:
    path = tmp_path / "runs.db"
    engine = wp.Engine(f"sqlite:///{path}", poll_interval=0.05)
    engine.register(hello)
    with engine.running():
        assert engine.start(hello, "ann").result(timeout=10) == "hello ann"
        files = [path, path.with_name("runs.db-wal"), path.with_name("runs.db-shm")]
        eventually(lambda: all(f.exists() for f in files), "the WAL and shared-memory files")
        assert {f.name: mode(f) for f in files} == {f.name: 0o600 for f in files}
    engine.close()


def open_and_close(url: str) -> None:
    engine = wp.Engine(url)
    engine.close()


@pytest.mark.parametrize("suffix", ["", "-wal", "-shm"])
@pytest.mark.parametrize("target_exists", [True, False])
def test_a_symlink_in_place_of_the_sqlite_files_is_refused(
    tmp_path: Path, suffix: str, target_exists: bool
) -> None:
    path = tmp_path / "runs.db"
    target = tmp_path / "elsewhere" / "victim"
    target.parent.mkdir()
    if target_exists:
        target.write_bytes(b"not yours")
    Path(f"{path}{suffix}").symlink_to(target)
    with pytest.raises(wp.ConfigurationError, match="symbolic link"):
        open_and_close(f"sqlite:///{path}")
    assert (target.read_bytes() if target_exists else target.exists()) == (
        b"not yours" if target_exists else False
    )


def test_an_existing_database_others_can_read_is_named_in_a_warning_at_open(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """waypost leaves an existing file's mode as it is (a group may be meant to read it)
    but says, when it opens (once per process), which files others may read and how to
    fix it."""
    path = tmp_path / "runs.db"
    engine = wp.Engine(f"sqlite:///{path}")
    engine.register(hello)
    with engine.running():
        assert engine.start(hello, "ann").result(timeout=10) == "hello ann"
    engine.close()
    assert [r for r in caplog.records if "chmod 600" in r.getMessage()] == []  # private
    for name in (path, path.with_name("runs.db-wal"), path.with_name("runs.db-shm")):
        name.touch()
        name.chmod(0o644)
    caplog.clear()
    open_and_close(f"sqlite:///{path}")
    (warning,) = [r for r in caplog.records if "chmod 600" in r.getMessage()]
    assert warning.levelname == "WARNING"
    for suffix in ("", "-wal", "-shm"):
        assert f"{path}{suffix} (0644)" in warning.getMessage()
    assert mode(path) == 0o644  # left as it is
    path.chmod(0o600)
    caplog.clear()
    open_and_close(f"sqlite:///{path}")  # -wal and -shm still 0644, or gone at close
    remaining = [r.getMessage() for r in caplog.records if "chmod 600" in r.getMessage()]
    assert all(f"{path} (" not in m for m in remaining)


def _fifo(tmp_path: Path) -> str:
    os.mkfifo(tmp_path / "pipe.db", 0o600)
    return str(tmp_path / "pipe.db")


@pytest.mark.parametrize(
    ("where", "why"),
    [
        pytest.param(lambda t: "/proc/waypost.db", "cannot hold files", id="proc"),
        pytest.param(lambda t: "/sys/waypost.db", "permission denied", id="sys"),
        pytest.param(lambda t: str(t), "is a folder", id="a folder"),
        pytest.param(lambda t: "/dev/null", "not a regular file", id="a device"),
        pytest.param(_fifo, "not a regular file", id="a pipe"),
        pytest.param(lambda t: str(t / ("n" * 300)), "name is too long", id="too long"),
        pytest.param(lambda t: str(t / "gone" / "x.db"), "does not exist", id="no folder"),
        pytest.param(lambda t: "/etc/hostname/x.db", "does not exist", id="file as folder"),
        pytest.param(lambda t: str(t / "a%00b.db"), "NUL", id="nul"),
    ],
)
def test_a_path_that_cannot_hold_the_database_is_a_waypost_error_naming_it(
    tmp_path: Path, where: Any, why: str
) -> None:
    path = where(tmp_path)
    with pytest.raises(wp.WaypostError) as caught:
        open_and_close(f"sqlite:///{path}")
    assert isinstance(caught.value, wp.ConfigurationError)
    message = str(caught.value)
    assert why in message and path.replace("%00", "\\x00")[:60] in message


def test_the_notifications_file_is_created_owner_only(tmp_path: Path, loose_umask: None) -> None:
    path = tmp_path / "notes" / "out.jsonl"
    FileSender(path).send(approval_notification())
    assert mode(path) == 0o600
    assert json.loads(path.read_text())["approve_token"] == "tok-approve"


@pytest.mark.parametrize("target_exists", [True, False])
def test_the_notifications_file_is_not_written_through_a_symlink(
    tmp_path: Path, target_exists: bool
) -> None:
    target = tmp_path / "victim"
    if target_exists:
        target.write_text("not yours\n")
    path = tmp_path / "out.jsonl"
    path.symlink_to(target)
    with pytest.raises(wp.ConfigurationError, match="symbolic link"):
        FileSender(path).send(approval_notification())
    assert (target.read_text() if target_exists else target.exists()) == (
        "not yours\n" if target_exists else False
    )


def test_a_notifications_file_others_can_read_or_that_is_no_file_is_refused(
    tmp_path: Path,
) -> None:
    shared = tmp_path / "shared.jsonl"
    shared.write_text("")
    shared.chmod(0o644)
    with pytest.raises(wp.ConfigurationError, match="chmod 600"):
        FileSender(shared).send(approval_notification())
    assert shared.read_text() == ""
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo, 0o600)
    with pytest.raises(wp.ConfigurationError, match="not a regular file"):
        FileSender(fifo).send(approval_notification())  # refused at once, not blocked on a reader
