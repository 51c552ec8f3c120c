"""The ```python blocks of the Markdown docs, and how each one runs.

A block runs as written, as a script in a fresh directory. An HTML comment on the
line before its fence (invisible once rendered) says what else it needs; clauses are
separated by commas:

    <!-- doc: id order -->                     other blocks refer to this one as `order`
    <!-- doc: fragment, setup engine -->       hidden code from tests/docs/setups.py first
    <!-- doc: fragment, after order -->        the code of the block `order` first
    <!-- doc: file order.py = order, pytest --> write block `order` to order.py beside it,
                                               and run this block as a pytest module
    <!-- doc: skip (needs a running server) --> not run here; say why

See tests/docs/README.md for the convention.
"""

from __future__ import annotations

import re
import textwrap
from dataclasses import dataclass
from pathlib import Path

FENCE = re.compile(r"^```python\s*$")
DIRECTIVE = re.compile(r"^<!--\s*doc:\s*(?P<clauses>.*?)\s*-->\s*$")
SKIP = re.compile(r"\bskip\s*\((?P<why>[^)]*)\)")
FILE = re.compile(r"^file\s+(?P<name>[\w./-]+)\s*=\s*(?P<block>[\w-]+)$")


class DirectiveError(ValueError):
    """A `<!-- doc: ... -->` comment that does not parse or names nothing."""


@dataclass(frozen=True)
class Block:
    """One ```python block: where it is, its code, and what its comment asks for."""

    path: str  # relative to the repository, e.g. "docs/guide/engine.md"
    line: int  # the line of the opening fence, 1-based
    code: str
    id: str | None = None
    fragment: bool = False
    setups: tuple[str, ...] = ()
    after: tuple[str, ...] = ()
    files: tuple[tuple[str, str], ...] = ()  # (file name, block id)
    pytest: bool = False
    skip: str | None = None

    @property
    def where(self) -> str:
        return f"{self.path}:{self.line}"


def parse_directive(text: str, where: str) -> dict[str, object]:
    """The fields of a Block that the clauses of one `doc:` comment set."""
    fields: dict[str, object] = {}
    skip = SKIP.search(text)
    if skip:
        if not skip["why"].strip():
            raise DirectiveError(f"{where}: say why a block is skipped: skip (why)")
        fields["skip"] = skip["why"].strip()
        text = text[: skip.start()] + text[skip.end() :]
    setups: list[str] = []
    after: list[str] = []
    files: list[tuple[str, str]] = []
    for clause in (c.strip() for c in text.split(",")):
        word, _, rest = clause.partition(" ")
        rest = rest.strip()
        if not clause:
            continue
        if clause == "fragment":
            fields["fragment"] = True
        elif clause == "pytest":
            fields["pytest"] = True
        elif word == "id" and rest:
            fields["id"] = rest
        elif word == "setup" and rest:
            setups.extend(rest.split())
        elif word == "after" and rest:
            after.extend(rest.split())
        elif (match := FILE.match(clause)) is not None:
            files.append((match["name"], match["block"]))
        else:
            raise DirectiveError(f"{where}: unknown doc clause {clause!r}")
    if (setups or after) and not fields.get("fragment"):
        raise DirectiveError(f"{where}: a block run after other code says `fragment`")
    fields.update(setups=tuple(setups), after=tuple(after), files=tuple(files))
    return fields


def blocks_of(path: Path, root: Path) -> list[Block]:
    """Every ```python block of the Markdown file at `path`, in order."""
    name = path.relative_to(root).as_posix()
    lines = path.read_text(encoding="utf-8").splitlines()
    found: list[Block] = []
    index = 0
    while index < len(lines):
        if not FENCE.match(lines[index]):
            index += 1
            continue
        start = index
        end = start + 1
        while end < len(lines) and lines[end].strip() != "```":
            end += 1
        where = f"{name}:{start + 1}"
        before = lines[start - 1] if start else ""
        directive = DIRECTIVE.match(before)
        fields = parse_directive(directive["clauses"], where) if directive else {}
        code = "\n".join(lines[start + 1 : end]) + "\n"
        found.append(Block(name, start + 1, code, **fields))  # type: ignore[arg-type]
        index = end + 1
    return found


def by_id(blocks: list[Block]) -> dict[str, Block]:
    named: dict[str, Block] = {}
    for block in blocks:
        if block.id is not None:
            if block.id in named:
                raise DirectiveError(f"{block.where}: id {block.id!r} is taken")
            named[block.id] = block
    return named


def script(block: Block, named: dict[str, Block], setups: dict[str, str]) -> str:
    """The code that runs for `block`: the blocks it comes after, its setups, then it.

    A setup with a line `# BLOCK` wraps the block instead: the block's code takes that
    line's place and indentation (a fragment of a function's body), and what follows
    the line runs after it."""
    before: list[str] = []
    after: list[str] = []
    code = f"# --- {block.where}\n{block.code}"
    for ref in block.after:
        if ref not in named:
            raise DirectiveError(f"{block.where}: no block with id {ref!r}")
        before.append(script(named[ref], named, setups))
    for name in block.setups:
        if name not in setups:
            raise DirectiveError(f"{block.where}: no setup {name!r} in tests/docs/setups.py")
        head, marker, tail = setups[name].partition("# BLOCK")
        if marker:
            head, indent = head.rsplit("\n", 1)
            code = textwrap.indent(code, indent)
            after.insert(0, tail)
        before.append(f"# --- setup {name}\n{head}")
    return "\n".join([*before, code]) + "".join(after)


def files(block: Block, named: dict[str, Block]) -> dict[str, str]:
    """The files (name -> text) written beside the block before it runs."""
    written: dict[str, str] = {}
    for name, ref in block.files:
        if ref not in named:
            raise DirectiveError(f"{block.where}: no block with id {ref!r}")
        written[name] = named[ref].code
    return written
