"""A browser-like client of the console for tests: it keeps cookies, reads each page's
CSRF token from its forms, and posts forms as a browser does."""

from __future__ import annotations

import re
from typing import Any

import httpx

from .server_fixtures import Api

CSRF = re.compile(r'name="csrf" value="([^"]+)"')


class Browser(Api):
    """An httpx client with a cookie jar, signed out until `sign_in_*`."""

    def __init__(self, base: str) -> None:
        super().__init__(base, None)
        self.http.follow_redirects = False

    def csrf(self, path: str) -> str:
        page = self.http.get(path)
        assert page.status_code == 200, (path, page.status_code, page.text[:500])
        found = CSRF.search(page.text)
        assert found is not None, f"no CSRF token on {path}"
        return found.group(1)

    def sign_in_key(self, key: str) -> httpx.Response:
        token = self.csrf("/sign-in")
        return self.http.post("/sign-in", data={"csrf": token, "key": key})

    def sign_in_password(self, tenant: str, user: str, password: str) -> httpx.Response:
        token = self.csrf("/sign-in")
        return self.http.post(
            "/sign-in", data={"csrf": token, "tenant": tenant, "user": user, "password": password}
        )

    def post_form(self, path: str, data: dict[str, Any], *, page: str | None = None) -> Any:
        """Post `data` with the CSRF token of `page` (default: the page at `path`'s run)."""
        token = self.csrf(page or "/runs")
        return self.http.post(path, data={"csrf": token, **data})
