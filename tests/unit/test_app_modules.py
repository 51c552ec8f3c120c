"""`--app` (`items_in_modules`): a module, a module and one attribute, or a file path;
a module that cannot be imported, or raises as it is, is named with why."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from waypost.errors import ConfigurationError
from waypost.runtime.registry import items_in_modules

APP = """
import waypost as wp

@wp.activity
def pack(ctx, item: str) -> str:
    return item

@wp.workflow(name="{name}")
async def order(ctx, item: str) -> str:
    return await ctx.run(pack, item)

both = [order, pack]
"""


@pytest.fixture
def folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", list(sys.path))
    before = set(sys.modules)
    yield tmp_path
    for name in set(sys.modules) - before:
        del sys.modules[name]


def names(items: list[object]) -> list[str]:
    return sorted(getattr(i, "__name__", "?") for i in items)


def test_a_file_path_is_imported_from_its_folder(folder: Path) -> None:
    (folder / "src").mkdir()
    (folder / "src" / "shop_by_path.py").write_text(APP.format(name="by-path"))
    assert names(items_in_modules(["src/shop_by_path.py"])) == ["order", "pack"]


def test_a_module_and_one_attribute(folder: Path) -> None:
    (folder / "shop_attr.py").write_text(APP.format(name="by-attr"))
    assert names(items_in_modules(["shop_attr:order"])) == ["order"]
    assert names(items_in_modules(["shop_attr:both"])) == ["order", "pack"]
    with pytest.raises(ConfigurationError, match="'APP' is not a @workflow or @activity"):
        items_in_modules(["shop_attr:APP"])


def test_a_module_that_is_not_there_says_where_it_was_looked_for(folder: Path) -> None:
    with pytest.raises(ConfigurationError, match="No module named 'nowhere_app'") as no:
        items_in_modules(["nowhere_app"])
    assert str(folder) in str(no.value) and "./shop.py" in str(no.value)
    with pytest.raises(ConfigurationError, match=r"no file 'missing\.py'"):
        items_in_modules(["missing.py"])


def test_a_module_that_raises_as_it_is_imported_is_named_with_its_error(folder: Path) -> None:
    (folder / "broken_app.py").write_text("import waypost\n\ndef f(:\n    pass\n")
    with pytest.raises(ConfigurationError, match=r"SyntaxError at broken_app\.py:3"):
        items_in_modules(["broken_app.py"])
    (folder / "raising_app.py").write_text("raise RuntimeError('no config')\n")
    with pytest.raises(ConfigurationError, match="RuntimeError: no config"):
        items_in_modules(["raising_app"])
