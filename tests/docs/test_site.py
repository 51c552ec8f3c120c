"""The documentation site (mkdocs.yml): a broken link fails its build, and the README,
which is not part of it, links only to files that exist."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers.doc_links import problems

ROOT = Path(__file__).resolve().parents[2]


def _example(text: str, heading: str) -> str:
    start = text.index(heading)
    code = text.index("```python", start)
    return text[code : text.index("```\n", code + 3)]


def test_every_link_of_the_readme_leads_to_a_file() -> None:
    assert problems(ROOT / "README.md") == []


def test_the_home_page_shows_the_readme_s_workflow() -> None:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    home = (ROOT / "docs" / "index.md").read_text(encoding="utf-8")
    assert _example(home, "## A workflow") == _example(readme, "## A workflow")


def _build(root: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(root / "site")],
        cwd=root,
        env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},
        capture_output=True,
        text=True,
        timeout=120,
    )


@pytest.mark.timeout(300)
def test_a_broken_link_an_unknown_anchor_or_a_missing_file_fails_the_build(
    tmp_path: Path,
) -> None:
    pytest.importorskip("mkdocs")
    pytest.importorskip("material")
    copy = tmp_path / "repo"
    copy.mkdir()
    shutil.copy(ROOT / "mkdocs.yml", copy)
    shutil.copytree(ROOT / "docs", copy / "docs")
    # the files outside docs/ that the pages link to
    for folder in ("tests", "examples", "src", "bench", "deploy", "scripts"):
        (copy / folder).symlink_to(ROOT / folder, target_is_directory=True)
    built = _build(copy)
    assert built.returncode == 0, built.stderr

    page = copy / "docs" / "guide" / "errors.md"
    page.write_text(
        page.read_text(encoding="utf-8")
        + "\n[a page](no-such-page.md), [an anchor](engine.md#no-such-anchor),"
        " [a file](../../tests/unit/test_no_such_file.py), [here](#nor-this)\n",
        encoding="utf-8",
    )
    broken = _build(copy)
    assert broken.returncode == 1
    for target in ("no-such-page.md", "#no-such-anchor", "test_no_such_file.py", "#nor-this"):
        assert target in broken.stderr, broken.stderr
