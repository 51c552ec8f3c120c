"""Two versions of a definition side by side: the rows a page shows, from difflib.

Both sides are the canonical body of a published version written as YAML, its
keys in the order the body keeps them, so a diff shows changes of content and
not of spelling (a duration written `P1D` or `86400`, keys reordered, comments).
The rows carry plain text; the template escapes it.
"""

from __future__ import annotations

import difflib
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import yaml

__all__ = ["DiffRow", "canonical_yaml", "side_by_side"]

CONTEXT = 3
"""Unchanged lines kept around each change; longer unchanged stretches are folded."""


@dataclass(frozen=True)
class DiffRow:
    """One row of a side-by-side diff.

    `kind` is `equal`, `replace`, `delete` (only on the left), `insert` (only
    on the right) or `fold` (unchanged lines left out; `left` says how many).
    A side without a line has `None` as its number and an empty text.
    """

    kind: str
    left_number: int | None
    left: str
    right_number: int | None
    right: str


def canonical_yaml(body: Mapping[str, Any]) -> str:
    """A definition's canonical body as YAML, in the body's own key order."""
    return yaml.safe_dump(
        dict(body), sort_keys=False, allow_unicode=True, default_flow_style=False, width=100
    )


def side_by_side(old: str, new: str, context: int = CONTEXT) -> list[DiffRow]:
    """The rows that show `old` (left) and `new` (right) side by side.

    Unchanged stretches longer than `2 * context` lines are folded to their
    first and last `context` lines around a `fold` row; identical texts give
    one `fold` row (or none when both are empty).
    """
    a, b = old.splitlines(), new.splitlines()
    rows: list[DiffRow] = []
    matcher = difflib.SequenceMatcher(None, a, b, autojunk=False)
    opcodes = matcher.get_opcodes()
    for index, (tag, i1, i2, j1, j2) in enumerate(opcodes):
        if tag == "equal":
            first, last = index == 0, index == len(opcodes) - 1
            keep_head = 0 if first else context
            keep_tail = 0 if last else context
            length = i2 - i1
            if length > keep_head + keep_tail + 1:
                rows.extend(_equal(a, i1, i1 + keep_head, j1))
                folded = length - keep_head - keep_tail
                rows.append(DiffRow("fold", None, f"{folded} unchanged lines", None, ""))
                rows.extend(_equal(a, i2 - keep_tail, i2, j2 - keep_tail))
            else:
                rows.extend(_equal(a, i1, i2, j1))
        elif tag == "replace":
            for k in range(max(i2 - i1, j2 - j1)):
                left = i1 + k if i1 + k < i2 else None
                right = j1 + k if j1 + k < j2 else None
                rows.append(
                    DiffRow(
                        "replace",
                        None if left is None else left + 1,
                        "" if left is None else a[left],
                        None if right is None else right + 1,
                        "" if right is None else b[right],
                    )
                )
        elif tag == "delete":
            rows.extend(DiffRow("delete", i + 1, a[i], None, "") for i in range(i1, i2))
        else:
            rows.extend(DiffRow("insert", None, "", j + 1, b[j]) for j in range(j1, j2))
    return rows


def _equal(lines: list[str], start: int, end: int, other_start: int) -> list[DiffRow]:
    return [
        DiffRow("equal", i + 1, lines[i], other_start + (i - start) + 1, lines[i])
        for i in range(start, end)
    ]
