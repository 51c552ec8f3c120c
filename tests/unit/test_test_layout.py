"""The tests keep their shared helpers in `tests/helpers` and their shared fixtures in a
`conftest.py`: no module under tests/ imports from a test module, so a test module can
be moved, split or deleted without breaking another."""

from __future__ import annotations

import ast
from pathlib import Path

TESTS = Path(__file__).resolve().parents[1]


def _package(path: Path) -> list[str]:
    """The dotted package of a module under tests/ (`tests.unit` for tests/unit/x.py)."""
    return ["tests", *path.relative_to(TESTS).parent.parts]


def imported_modules(source: str, path: Path) -> list[tuple[int, str]]:
    """(line, absolute dotted name) of each module and name that `source`, the text of
    the module at `path`, imports; a relative import resolved against its package."""
    tree = ast.parse(source, filename=str(path))
    found: list[tuple[int, str]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.extend((node.lineno, alias.name) for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                package = _package(path)
                base = package[: len(package) - node.level + 1]
                module = ".".join([*base, *([node.module] if node.module else [])])
            else:
                module = node.module or ""
            found.append((node.lineno, module))
            # `from tests.unit import test_x` names the module in the imported names.
            found.extend((node.lineno, f"{module}.{alias.name}") for alias in node.names)
    return found


def is_test_module(dotted: str) -> bool:
    parts = dotted.split(".")
    return parts[0] == "tests" and any(part.startswith("test_") for part in parts[1:])


def test_imports_from_test_modules_are_found() -> None:
    assert is_test_module("tests.unit.test_runtime")
    assert is_test_module("tests.integration.test_approvals.Mailbox")
    assert not is_test_module("tests.helpers.runtime")
    assert not is_test_module("waypost.testing")
    assert not is_test_module("tests.acceptance.compute_app")


def test_relative_imports_resolve_against_the_modules_package() -> None:
    source = (
        "from .test_approvals import Mailbox\nfrom . import test_chain\nfrom ..helpers import x\n"
    )
    names = [name for _, name in imported_modules(source, TESTS / "integration" / "test_x.py")]
    assert "tests.integration.test_approvals" in names
    assert "tests.integration.test_chain" in names
    assert "tests.helpers.x" in names
    assert [n for n in names if is_test_module(n)] == [
        "tests.integration.test_approvals",
        "tests.integration.test_approvals.Mailbox",
        "tests.integration.test_chain",
    ]


def test_no_module_under_tests_imports_from_a_test_module() -> None:
    offenders = [
        f"{path.relative_to(TESTS.parent)}:{line} imports {name}"
        for path in sorted(TESTS.rglob("*.py"))
        for line, name in imported_modules(path.read_text(), path)
        if is_test_module(name)
    ]
    assert offenders == [], (
        "shared helpers belong in tests/helpers and shared fixtures in a conftest.py:\n"
        + "\n".join(offenders)
    )
