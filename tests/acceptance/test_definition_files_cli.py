"""`waypost definitions validate|publish FILE` never shows a traceback, whatever FILE is.

Each bad file gives exit 1 and a few lines on stderr saying what is wrong; nothing
is published.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.timeout(120)

WAYPOST = Path(sys.executable).parent / "waypost"

GOOD = """
name: tidy
start: done
steps:
  done: {type: succeed}
"""


def waypost(tmp_path: Path, *args: str, stdin: bytes = b"") -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "WAYPOST_DB": f"sqlite:///{tmp_path / 'waypost.db'}"}
    return subprocess.run(
        [str(WAYPOST), *args],
        capture_output=True,
        input=stdin.decode("latin-1"),
        text=True,
        encoding="latin-1",
        timeout=60,
        env=env,
        cwd=tmp_path,
        check=False,
    )


def bad_files(tmp_path: Path) -> dict[str, tuple[str, str]]:
    """name -> (path, what stderr must say)."""
    files = {
        "latin1": ("name: caf\xe9\nstart: a\n".encode("latin-1"), "not UTF-8"),
        "binary": (bytes(range(256)) * 4, "not UTF-8"),
        "empty": (b"", "empty"),
        "huge": (b"# " + b"x" * 400_000 + b"\n", "larger than"),
        "deep": (b"name: d\nsteps: " + b"[" * 3000 + b"]" * 3000 + b"\n", "nested more than"),
        "digits": (
            b"name: d\nstart: a\nsteps: {a: {type: wait, duration: " + b"9" * 5000 + b"}}\n",
            "digits",
        ),
        "nul": (b"name: d\x00\n", "YAML"),
    }
    out: dict[str, tuple[str, str]] = {}
    for name, (content, says) in files.items():
        path = tmp_path / f"{name}.yaml"
        path.write_bytes(content)
        out[name] = (str(path), says)
    directory = tmp_path / "a-directory"
    directory.mkdir()
    out["directory"] = (str(directory), "directory")
    out["missing"] = (str(tmp_path / "missing.yaml"), "No such file")
    return out


@pytest.mark.parametrize("command", ["validate", "publish"])
def test_a_bad_definition_file_is_a_clear_error_not_a_traceback(
    tmp_path: Path, command: str
) -> None:
    for name, (path, says) in bad_files(tmp_path).items():
        proc = waypost(tmp_path, "definitions", command, path)
        assert proc.returncode == 1, (name, proc.stdout, proc.stderr)
        assert "Traceback" not in proc.stderr, (name, proc.stderr)
        assert says in proc.stderr, (name, proc.stderr)
        assert len(proc.stderr.splitlines()) <= 4, (name, proc.stderr)
    listed = waypost(tmp_path, "definitions", "list", "--json")
    if command == "validate":  # validating touches no database, so there is none
        assert listed.returncode == 1 and "there is no database at" in listed.stderr
    else:
        assert listed.stdout.strip() == "[]"


def test_a_bad_definition_on_stdin_is_a_clear_error(tmp_path: Path) -> None:
    proc = waypost(tmp_path, "definitions", "validate", "-", stdin=b"name: caf\xe9\n")
    assert proc.returncode == 1
    assert "not UTF-8" in proc.stderr and "Traceback" not in proc.stderr


def test_a_good_file_still_validates_and_publishes(tmp_path: Path) -> None:
    path = tmp_path / "tidy.yaml"
    path.write_bytes(b"\xef\xbb\xbf" + GOOD.encode())  # with a byte order mark
    assert waypost(tmp_path, "definitions", "validate", str(path)).returncode == 0
    proc = waypost(tmp_path, "definitions", "publish", str(path))
    assert proc.returncode == 0, proc.stderr
    assert "published tidy version 1" in proc.stdout


def test_a_step_limit_below_one_is_a_usage_error(tmp_path: Path) -> None:
    path = tmp_path / "tidy.yaml"
    path.write_text(GOOD)
    proc = waypost(tmp_path, "definitions", "validate", str(path), "--max-steps", "0")
    assert proc.returncode == 2
    assert "Traceback" not in proc.stderr


def test_a_run_input_the_cli_cannot_read_is_a_clear_error(tmp_path: Path) -> None:
    path = tmp_path / "tidy.yaml"
    path.write_text(GOOD)
    assert waypost(tmp_path, "definitions", "publish", str(path)).returncode == 0
    for bad in ("[" * 5000 + "]" * 5000, "9" * 5000, "{nope"):
        proc = waypost(tmp_path, "start", "tidy", bad)
        assert proc.returncode == 2, proc.stderr
        assert "Traceback" not in proc.stderr and "not JSON" in proc.stderr
    deep = '{"a":' + "[" * 100 + "]" * 100 + "}"
    proc = waypost(tmp_path, "start", "tidy", deep)
    assert proc.returncode == 1 and "Traceback" not in proc.stderr
    assert "nested more than 64 levels deep" in proc.stderr
