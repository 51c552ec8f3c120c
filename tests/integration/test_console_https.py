"""Over https the console's cookies are Secure (the app's ASGI scope says https)."""

from __future__ import annotations

import asyncio
import re
from pathlib import Path

import httpx

from waypost.client.engine import AsyncEngine
from waypost.model import operations as ops
from waypost.server.app import create_app


def test_over_https_the_session_cookie_is_secure(tmp_path: Path) -> None:
    async def main() -> tuple[str, str]:
        async with AsyncEngine(f"sqlite:///{tmp_path / 'https.db'}") as engine:
            local = engine.local("acme")
            await engine.execute(ops.CreateTenant(tenant="acme"), local)
            new = await engine.execute(ops.CreateKey(principal="olga", roles=["viewer"]), local)
            transport = httpx.ASGITransport(app=create_app(engine))
            async with httpx.AsyncClient(
                transport=transport, base_url="https://console.test"
            ) as http:
                form = await http.get("/sign-in")
                token = re.search(r'name="csrf" value="([^"]+)"', form.text)
                assert token is not None
                signed = await http.post(
                    "/sign-in",
                    data={"csrf": token.group(1), "key": new.key},
                    headers={"Origin": "https://console.test"},
                )
                assert signed.status_code == 303
                return form.headers["set-cookie"], signed.headers["set-cookie"]

    form_cookie, session_cookie = asyncio.run(main())
    assert "secure" in form_cookie.lower()
    assert "waypost_session=" in session_cookie
    assert "secure" in session_cookie.lower()
    assert "httponly" in session_cookie.lower()
