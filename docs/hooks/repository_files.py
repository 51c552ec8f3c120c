"""MkDocs hooks: the repository files the pages link to are checked and published, and
the decision records are listed.

The docs link to files outside docs/ (a test behind a guarantee, an example,
bench/README.md) by paths relative to the page, so the links work on a code host and in
an editor. MkDocs knows only the files under docs/ and would report each such link as
broken. Here every file outside docs/ that a page links to, if it exists in the
repository, is published under `repository/` (its path in the repository below that),
and the link is pointed at it; a link to a file that does not exist is left as written,
for MkDocs to report: with `--strict` it fails the build like any other broken link.
Markdown files published this way are rendered as pages, and their own links are
followed the same way (bench/README.md links back into docs/).
"""

from __future__ import annotations

import os
import posixpath
import re
from pathlib import Path

from mkdocs.config.defaults import MkDocsConfig
from mkdocs.structure.files import File, Files, InclusionLevel
from mkdocs.structure.pages import Page

LINK = re.compile(r"\]\(([^)\s]+)\)")
FENCE = re.compile(r"^\s*(```|~~~)")
SCHEME = re.compile(r"^[a-z][a-z0-9+.-]*:")
OUTSIDE = "repository"  # where files from outside docs/ are published in the site
DECISIONS = "decisions/README.md"


def _docs(config: MkDocsConfig) -> Path:
    return Path(os.path.abspath(config.docs_dir))


def _real_path(file: File, docs: Path) -> Path:
    """Where the page's file is in the checkout (symbolic links not followed)."""
    if file.src_uri.startswith(f"{OUTSIDE}/"):
        return docs.parent / file.src_uri.removeprefix(f"{OUTSIDE}/")
    return docs / file.src_uri


def _uri_of(target: Path, docs: Path) -> str | None:
    """The site's name (a src_uri) for the checkout's file `target`, or None if there is
    none: a file outside the checkout, or one that does not exist."""
    if target.is_relative_to(docs):
        return target.relative_to(docs).as_posix()
    if target.is_relative_to(docs.parent) and target.is_file():
        return f"{OUTSIDE}/{target.relative_to(docs.parent).as_posix()}"
    return None


def _links(markdown: str) -> list[str]:
    """The relative link targets of a Markdown text, outside its code blocks."""
    found: list[str] = []
    in_fence = False
    for line in markdown.splitlines():
        if FENCE.match(line):
            in_fence = not in_fence
        elif not in_fence:
            found.extend(
                target
                for target in LINK.findall(line)
                if not SCHEME.match(target) and not target.startswith(("#", "/"))
            )
    return found


def _resolve(page: File, target: str, docs: Path) -> tuple[Path, str]:
    """The checkout's file a link of `page` leads to, and the rest of the link (#...)."""
    path, mark, rest = target.partition("#")
    real = Path(os.path.normpath(_real_path(page, docs).parent / path))
    return real, mark + rest


def on_files(files: Files, config: MkDocsConfig) -> Files:
    docs = _docs(config)
    pending = [file for file in files if file.is_documentation_page()]
    while pending:
        page = pending.pop()
        for target in _links(_real_path(page, docs).read_text(encoding="utf-8")):
            real, _ = _resolve(page, target, docs)
            uri = _uri_of(real, docs)
            if uri is None or not uri.startswith(f"{OUTSIDE}/") or uri in files.src_uris:
                continue
            added = File.generated(
                config, uri, abs_src_path=str(real), inclusion=InclusionLevel.NOT_IN_NAV
            )
            files.append(added)
            if added.is_documentation_page():
                pending.append(added)
    return files


def _relinked(markdown: str, page: File, docs: Path) -> str:
    """The page's links to files outside docs/ (or, from a file outside, back into
    docs/) written as the site's paths; a link to nothing is left as it is."""
    here = posixpath.dirname(page.src_uri)

    def relink(match: re.Match[str]) -> str:
        target = match[1]
        if SCHEME.match(target) or target.startswith(("#", "/")):
            return match[0]
        real, anchor = _resolve(page, target, docs)
        uri = _uri_of(real, docs)
        if uri is None:
            return match[0]
        return f"]({posixpath.relpath(uri, here or '.')}{anchor})"

    lines = []
    in_fence = False
    for line in markdown.split("\n"):
        if FENCE.match(line):
            in_fence = not in_fence
        elif not in_fence:
            line = LINK.sub(relink, line)
        lines.append(line)
    return "\n".join(lines)


def _decisions(markdown: str, files: Files) -> str:
    """The decisions' index lists every record, so a new one needs no edit of it."""
    records = sorted(
        (
            file
            for file in files
            if file.src_uri.startswith("decisions/")
            and file.src_uri != DECISIONS
            and file.is_documentation_page()
        ),
        key=lambda file: file.src_uri,
    )
    lines = [markdown.rstrip(), ""]
    for record in records:
        title = Path(record.abs_src_path or "").read_text(encoding="utf-8").partition("\n")[0]
        lines.append(f"- [{title.lstrip('# ').strip()}]({posixpath.basename(record.src_uri)})")
    return "\n".join(lines) + "\n"


def on_page_markdown(markdown: str, *, page: Page, config: MkDocsConfig, files: Files) -> str:
    if page.file.src_uri == DECISIONS:
        markdown = _decisions(markdown, files)
    return _relinked(markdown, page.file, _docs(config))
