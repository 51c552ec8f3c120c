"""Every ```python block of README.md and docs/**/*.md runs as written (issue 27).

Each block is one test, named by its file and line. It runs in a subprocess of this
Python, in a fresh directory where `examples/` is reachable the way it is from a
checkout's root, so `sqlite:///x.db` files land there and a block may open
`examples/definitions/purchase_order.yaml`. What a block needs beyond its own code is
said in a `<!-- doc: ... -->` comment before its fence (tests/docs/README.md).
docs/architecture.md describes the inside and docs/decisions/ record history: their
code is illustration, not a recipe, and is not run.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.docs.setups import SETUPS
from tests.helpers.doc_blocks import (
    Block,
    DirectiveError,
    blocks_of,
    by_id,
    files,
    parse_directive,
    script,
)

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"
PAGES = [
    ROOT / "README.md",
    *sorted(
        page
        for page in DOCS.rglob("*.md")
        if page != DOCS / "architecture.md" and DOCS / "decisions" not in page.parents
    ),
]
TIMEOUT = 60  # seconds a block may take; most take one or two

BLOCKS = [block for page in PAGES for block in blocks_of(page, ROOT)]
NAMED = by_id(BLOCKS)


def _run(block: Block, workdir: Path) -> subprocess.CompletedProcess[str]:
    (workdir / "examples").symlink_to(ROOT / "examples", target_is_directory=True)
    for name, text in files(block, NAMED).items():
        (workdir / name).write_text(text)
    code = script(block, NAMED, SETUPS)
    if block.pytest:
        (workdir / "test_block.py").write_text(code)
        command = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "test_block.py"]
    else:
        (workdir / "block.py").write_text(code)
        command = [sys.executable, "block.py"]
    # Plugins stay off in a block's own pytest run: none is needed, and loading them all
    # would double its time.
    env = {
        **os.environ,
        "PYTHONPATH": str(workdir),
        "PYTHONDONTWRITEBYTECODE": "1",
        "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1",
    }
    env.pop("PYTEST_XDIST_WORKER", None)
    env.pop("PYTEST_ADDOPTS", None)
    return subprocess.run(
        command, cwd=workdir, env=env, capture_output=True, text=True, timeout=TIMEOUT
    )


@pytest.mark.parametrize("block", BLOCKS, ids=[block.where for block in BLOCKS])
def test_block_runs_as_written(block: Block, tmp_path: Path) -> None:
    if block.skip is not None:
        pytest.skip(block.skip)
    try:
        proc = _run(block, tmp_path)
    except subprocess.TimeoutExpired as timeout:
        pytest.fail(
            f"{block.where}: still running after {TIMEOUT} s\n--- stdout\n{timeout.stdout!r}\n"
            f"--- stderr\n{timeout.stderr!r}",
            pytrace=False,
        )
    if proc.returncode != 0:
        numbered = "\n".join(
            f"{n:4} {line}" for n, line in enumerate(script(block, NAMED, SETUPS).splitlines(), 1)
        )
        pytest.fail(
            f"{block.where} exits with {proc.returncode}\n--- script\n{numbered}\n"
            f"--- stdout\n{proc.stdout}\n--- stderr\n{proc.stderr}\n"
            "(a fragment? say what it needs in a <!-- doc: ... --> comment: tests/docs/README.md)",
            pytrace=False,
        )


def test_every_skip_says_why_and_they_stay_few() -> None:
    skipped = [block.where for block in BLOCKS if block.skip is not None]
    assert len(skipped) <= len(BLOCKS) // 5, skipped


def test_every_setup_serves_a_block() -> None:
    used = {name for block in BLOCKS for name in block.setups}
    assert set(SETUPS) - used == set()


def test_a_directive_says_what_a_block_needs() -> None:
    fields = parse_directive("id b, fragment, setup engine run, after a, file m.py = a", "x:1")
    assert fields == {
        "id": "b",
        "fragment": True,
        "setups": ("engine", "run"),
        "after": ("a",),
        "files": (("m.py", "a"),),
    }
    assert parse_directive("skip (needs SMTP, a real one)", "x:1")["skip"] == (
        "needs SMTP, a real one"
    )


@pytest.mark.parametrize(
    ("clauses", "error"),
    [
        ("setup engine", "x:1: a block run after other code says `fragment`"),
        ("fragment, setpu engine", "x:1: unknown doc clause 'setpu engine'"),
        ("skip ()", "x:1: say why a block is skipped: skip (why)"),
    ],
)
def test_a_wrong_directive_is_refused_with_its_place(clauses: str, error: str) -> None:
    with pytest.raises(DirectiveError) as refused:
        parse_directive(clauses, "x:1")
    assert str(refused.value) == error


def test_a_setup_with_a_block_line_wraps_the_block() -> None:
    block = Block("x.md", 3, "print(1)\nprint(2)\n", fragment=True, setups=("head", "wrap"))
    setups = {"head": "a = 1\n", "wrap": "with open('f', 'w'):\n    # BLOCK\nprint(3)\n"}
    assert script(block, {}, setups).splitlines() == [
        "# --- setup head",
        "a = 1",
        "",
        "# --- setup wrap",
        "with open('f', 'w'):",
        "    # --- x.md:3",
        "    print(1)",
        "    print(2)",
        "",
        "print(3)",
    ]
