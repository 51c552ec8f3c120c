"""The server's dependency floors stay past the versions with published advisories.

Each floor names the version that fixed the advisories listed beside it; an install that
resolves the lowest versions pyproject.toml allows never gets a known-vulnerable one.
"""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.version import Version

PYPROJECT = Path(__file__).resolve().parents[2] / "pyproject.toml"

# package -> (the lowest version without the advisories, the advisories)
FIXED = {
    # CVE-2024-24762 (0.0.7), CVE-2024-53981 (0.0.18), CVE-2026-40347 (0.0.26),
    # CVE-2026-42561 (0.0.27), CVE-2026-53538/53539 (0.0.30), CVE-2026-53540 (0.0.31)
    "python-multipart": "0.0.31",
    # CVE-2024-47874 (0.40.0), CVE-2025-54121 (0.47.2), CVE-2025-62727 (0.49.1),
    # CVE-2026-48710 (1.0.1), the form parser's limits enforced (1.3.1)
    "starlette": "1.3.1",
    # the first FastAPI that lets starlette 1.x install
    "fastapi": "0.133.1",
}


def _floors(extra: str) -> dict[str, Version]:
    project = tomllib.loads(PYPROJECT.read_text())["project"]
    floors: dict[str, Version] = {}
    for text in project["optional-dependencies"][extra]:
        requirement = Requirement(text)
        for spec in requirement.specifier:
            if spec.operator == ">=":
                floors[re.sub(r"[-_.]+", "-", requirement.name.lower())] = Version(spec.version)
    return floors


@pytest.mark.parametrize("extra", ["server", "test"])
def test_the_server_extras_floors_are_past_the_known_advisories(extra: str) -> None:
    floors = _floors(extra)
    for package, fixed in FIXED.items():
        assert package in floors, f"the {extra} extra names no floor for {package}"
        assert floors[package] >= Version(fixed), (extra, package, floors[package], fixed)
