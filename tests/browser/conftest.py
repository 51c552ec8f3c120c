"""Browser tests: the console and the approval pages in a real headless Chromium.

Playwright drives Debian's Chromium (`/usr/bin/chromium`, from the `chromium`
package; `.ci/run` installs it when missing). Nothing is downloaded at test time:
the launch names the system browser, and `PLAYWRIGHT_SKIP_BROWSER_DOWNLOAD` is set.
Without that browser these tests are skipped, saying why; CI has it, so they run there.

Every test here is marked `browser`. `screenshot(page, name)` saves what the page
shows under `build/screenshots/` (gitignored), the artifacts CI keeps.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

CHROMIUM = Path("/usr/bin/chromium")
SCREENSHOTS = Path(__file__).parents[2] / "build" / "screenshots"
PHONE = {"width": 390, "height": 844}  # a phone held upright, in CSS pixels
DESKTOP = {"width": 1280, "height": 860}

os.environ.setdefault("PLAYWRIGHT_SKIP_BROWSER_DOWNLOAD", "1")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    here = Path(__file__).parent
    missing = None
    if not CHROMIUM.exists():
        missing = pytest.mark.skip(
            reason=f"{CHROMIUM} is missing: apt-get install chromium chromium-driver (.ci/run does)"
        )
    for item in items:
        if here in Path(str(item.fspath)).parents:
            item.add_marker(pytest.mark.browser)
            if missing is not None:
                item.add_marker(missing)


@pytest.fixture(scope="session")
def browser() -> Iterator[Any]:
    """One headless Chromium for the session (the system's, never a downloaded one)."""
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        chromium = playwright.chromium.launch(
            executable_path=str(CHROMIUM),
            headless=True,
            args=["--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu"],
        )
        try:
            yield chromium
        finally:
            chromium.close()


@pytest.fixture
def new_page(browser: Any) -> Iterator[Any]:
    """`new_page(viewport=DESKTOP)`: a page in a fresh browser context (its own cookies)."""
    contexts: list[Any] = []

    def make(viewport: dict[str, int] | None = None, **options: Any) -> Any:
        context = browser.new_context(viewport=viewport or DESKTOP, **options)
        context.set_default_timeout(15_000)
        contexts.append(context)
        return context.new_page()

    yield make
    for context in contexts:
        context.close()


@pytest.fixture
def page(new_page: Any) -> Any:
    """A desktop-sized headless page of its own."""
    return new_page()


def screenshot(page: Any, name: str, *, full_page: bool = True, folder: Path | None = None) -> Path:
    """Save what `page` shows (the whole page, or only the window) as
    build/screenshots/NAME.png, and as FOLDER/NAME.png too when a folder (a test's
    tmp_path) is given; the path of the last copy."""
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    path = SCREENSHOTS / f"{name}.png"
    page.screenshot(path=str(path), full_page=full_page)
    if folder is not None:
        path = folder / f"{name}.png"
        page.screenshot(path=str(path), full_page=full_page)
    return path


def fits_width(page: Any) -> bool:
    """Whether the page needs no sideways scrolling at its viewport's width."""
    width: int = page.evaluate("document.documentElement.scrollWidth")
    return width <= page.viewport_size["width"]
