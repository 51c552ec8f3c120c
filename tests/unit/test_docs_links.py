"""docs/guarantees.md links every claim to a test: each link must lead somewhere real."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.helpers.doc_links import LINK, TEST_NAME, links, problems

ROOT = Path(__file__).resolve().parents[2]
GUARANTEES = ROOT / "docs" / "guarantees.md"


def test_every_link_of_the_guarantees_leads_to_a_file_and_the_test_it_names() -> None:
    assert GUARANTEES.exists()
    assert len(links(GUARANTEES.read_text(encoding="utf-8"))) > 50
    assert problems(GUARANTEES) == []


def test_every_test_named_in_the_guarantees_is_linked_to_its_file() -> None:
    """A test name written outside a link would be a claim nobody can follow."""
    text = GUARANTEES.read_text(encoding="utf-8")
    outside = LINK.sub("", text)
    assert TEST_NAME.findall(outside) == []


@pytest.mark.parametrize(
    ("markdown", "expected"),
    [
        ("[`test_the_import_contracts_hold`](../tests/unit/test_architecture.py)", []),
        ("[x](../tests/unit/test_architecture.py#test_the_import_contracts_hold)", []),
        ("[guide](guide.md) [web](https://example.com/nowhere) [here](#top)", []),
        ("[a](../tests/unit/no_such_file.py)", ["../tests/unit/no_such_file.py: no such file"]),
        (
            "[`test_nothing_like_this`](../tests/unit/test_architecture.py)",
            ["../tests/unit/test_architecture.py: no function test_nothing_like_this"],
        ),
        (
            "[`test_the_import_contracts_hold`](guide.md)",
            ["guide.md: names test_the_import_contracts_hold but is not a Python file"],
        ),
    ],
)
def test_the_check_finds_what_it_should(tmp_path: Path, markdown: str, expected: list[str]) -> None:
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "guide.md").write_text("# guide\n")
    tests = tmp_path / "tests" / "unit"
    tests.mkdir(parents=True)
    (tests / "test_architecture.py").write_text("def test_the_import_contracts_hold(): pass\n")
    page = docs / "page.md"
    page.write_text(markdown + "\n")
    assert problems(page) == expected
