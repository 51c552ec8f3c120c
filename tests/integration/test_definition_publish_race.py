"""Publishing under concurrency: every publisher gets a version, on both stores.

Two dozen publishers of different content for the same name at once (from several
engines, each with its own connections: on PostgreSQL they really race) must each
get a version; the versions are 1..n without gaps or duplicates, and identical
content is one version.
"""

from __future__ import annotations

import asyncio

import pytest

import waypost as wp

pytestmark = pytest.mark.timeout(180)

PUBLISHERS = 24


def version_text(index: int) -> str:
    return f"""
name: raced
description: "content {index}"
start: done
steps:
  done: {{type: succeed}}
"""


def test_two_dozen_concurrent_publishers_each_get_a_version(db_url: str) -> None:
    async def body() -> None:
        engines = [wp.AsyncEngine(db_url) for _ in range(4)]
        try:
            for engine in engines:
                await engine.open()
            # Each distinct content once, and three of them published twice more.
            contents = [version_text(i) for i in range(PUBLISHERS)]
            contents += [version_text(0), version_text(5), version_text(5)]
            infos = await asyncio.gather(
                *(
                    engines[i % len(engines)].publish(text, by=f"p{i}")
                    for i, text in enumerate(contents)
                )
            )
        finally:
            for engine in engines:
                await engine.close()
        by_text: dict[str, set[int]] = {}
        for text, info in zip(contents, infos, strict=True):
            by_text.setdefault(text, set()).add(info.version)
        assert all(len(versions) == 1 for versions in by_text.values())  # one per content
        versions = sorted(next(iter(v)) for v in by_text.values())
        assert versions == list(range(1, PUBLISHERS + 1))  # no gap, no duplicate
        assert sum(info.created for info in infos) == PUBLISHERS

    asyncio.run(body())
