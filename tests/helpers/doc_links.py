"""Relative links of a markdown page, and those that lead nowhere or name a test their
file lacks (docs/guarantees.md links every claim to its test)."""

from __future__ import annotations

import ast
import re
from pathlib import Path

LINK = re.compile(r"\[([^\]]*)\]\(([^)\s]+)\)")
TEST_NAME = re.compile(r"\btest_\w+\b(?!\.py)")  # a test's name, not a file's


def links(text: str) -> list[tuple[str, str, str]]:
    """(link text, target path, anchor) of every relative link in a markdown text."""
    found = []
    for label, target in LINK.findall(text):
        if re.match(r"^[a-z][a-z0-9+.-]*:", target) or target.startswith("#"):
            continue  # absolute URLs and anchors within the page
        path, _, anchor = target.partition("#")
        found.append((label, path, anchor))
    return found


def functions_in(source: Path) -> set[str]:
    tree = ast.parse(source.read_text(encoding="utf-8"))
    return {
        node.name
        for node in ast.walk(tree)
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)
    }


def problems(page: Path) -> list[str]:
    """Every relative link of `page` that leads nowhere or names a test its file lacks."""
    found = []
    for label, path, anchor in links(page.read_text(encoding="utf-8")):
        target = (page.parent / path).resolve()
        if not target.exists():
            found.append(f"{path}: no such file")
            continue
        named = TEST_NAME.findall(label) + TEST_NAME.findall(anchor)
        if named and target.suffix != ".py":
            found.append(f"{path}: names {named[0]} but is not a Python file")
            continue
        if named:
            missing = sorted(set(named) - functions_in(target))
            found.extend(f"{path}: no function {name}" for name in missing)
    return found
