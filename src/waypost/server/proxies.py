"""Who is asking, behind a proxy; and the headers every answer carries.

**Trusted proxies.** By default the server believes only its socket: the client's address
is the peer's, the scheme is the connection's, and `X-Forwarded-*` headers are ignored
(anyone can send them). With trusted proxies (`waypost server --trusted-proxy
CIDR[,CIDR]`), a request whose peer is inside one of those networks is taken as a proxy
speaking for someone else, and `ForwardedFor` rewrites the request before any route
sees it:

- the client's address is the right-most address of `X-Forwarded-For` that is not itself
  a trusted proxy (each proxy appends the address it received from; what the client
  wrote is to the left and is not believed);
- the scheme is the right-most `X-Forwarded-Proto` (`http` or `https`): what the proxy
  next to the server was reached with, so cookies are `Secure` and the console's
  `Origin` check expects `https://...` behind a TLS-terminating proxy;
- the host is the right-most `X-Forwarded-Host`, if the proxy sends one (most pass
  `Host` through instead).

Sign-in throttling counts by that address; the console's origin check and cookie flags
use that scheme and host.

**Headers of every answer** (`AnswerHeaders`): `X-Content-Type-Options: nosniff`;
`Cache-Control: no-store` unless the route chose its own (the stylesheets); and over
https (direct, or through a trusted proxy), `Strict-Transport-Security`.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Awaitable, Callable, Iterable, MutableMapping
from dataclasses import dataclass
from typing import Any

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
App = Callable[[Scope, Any, Any], Awaitable[None]]
Network = ipaddress.IPv4Network | ipaddress.IPv6Network

HSTS = "max-age=31536000"  # a year: browsers use https for this host from then on
MAX_PROXIES = 100
_HOST = re.compile(r"[A-Za-z0-9.\-]{1,253}(:[0-9]{1,5})?|\[[0-9A-Fa-f:.]{2,45}\](:[0-9]{1,5})?")


@dataclass(frozen=True)
class TrustedProxies:
    """The networks whose peers' `X-Forwarded-*` headers are believed (none by default)."""

    networks: tuple[Network, ...] = ()

    @classmethod
    def parse(cls, specs: Iterable[str]) -> TrustedProxies:
        """From texts of comma-separated addresses or networks (`10.0.0.0/8,::1`);
        `ValueError` naming the one that is neither."""
        networks: list[Network] = []
        for spec in specs:
            for part in spec.split(","):
                text = part.strip()
                if not text:
                    continue
                try:
                    networks.append(ipaddress.ip_network(text, strict=False))
                except ValueError:
                    raise ValueError(
                        f"a trusted proxy is an address or a network (10.0.0.0/8, ::1), "
                        f"not {text[:60]!r}"
                    ) from None
        if len(networks) > MAX_PROXIES:
            raise ValueError(f"at most {MAX_PROXIES} trusted proxy networks, not {len(networks)}")
        return cls(tuple(networks))

    def texts(self) -> list[str]:
        return [str(n) for n in self.networks]

    def trusts(self, address: str) -> bool:
        try:
            ip = ipaddress.ip_address(address)
        except ValueError:
            return False
        if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
            ip = ip.ipv4_mapped
        return any(ip in network for network in self.networks)

    def client_of(self, peer: str, forwarded_for: list[str]) -> str:
        """The client's address: from the peer back along `X-Forwarded-For` while each
        hop is a trusted proxy; the first that is not (or the last trusted one, where the
        header runs out or holds something that is no address)."""
        client = peer
        for entry in reversed(forwarded_for):
            if not self.trusts(client):
                break
            try:
                client = str(ipaddress.ip_address(entry))
            except ValueError:
                break
        return client


def _header_values(headers: list[tuple[bytes, bytes]], name: bytes) -> list[str]:
    """Every comma-separated value of every header `name`, in order."""
    values: list[str] = []
    for key, value in headers:
        if key.lower() == name:
            values.extend(v.strip() for v in value.decode("latin-1").split(","))
    return [v for v in values if v]


class ForwardedFor:
    """Believes `X-Forwarded-For`, `-Proto` and `-Host` from trusted proxies (see module)."""

    def __init__(self, app: App, proxies: TrustedProxies) -> None:
        self.app = app
        self.proxies = proxies

    async def __call__(self, scope: Scope, receive: Any, send: Any) -> None:
        client = scope.get("client")
        if scope["type"] == "http" and client and self.proxies.trusts(client[0]):
            scope = self.forwarded(scope, client[0])
        await self.app(scope, receive, send)

    def forwarded(self, scope: Scope, peer: str) -> Scope:
        headers: list[tuple[bytes, bytes]] = list(scope.get("headers") or [])
        scope = dict(scope)
        address = self.proxies.client_of(peer, _header_values(headers, b"x-forwarded-for"))
        scope["client"] = (address, 0)
        protos = _header_values(headers, b"x-forwarded-proto")
        if protos and protos[-1].lower() in ("http", "https"):
            scope["scheme"] = protos[-1].lower()
        hosts = _header_values(headers, b"x-forwarded-host")
        if hosts and _HOST.fullmatch(hosts[-1]):
            kept = [(k, v) for k, v in headers if k.lower() != b"host"]
            scope["headers"] = [(b"host", hosts[-1].encode("latin-1")), *kept]
        return scope


class AnswerHeaders:
    """Adds the headers every answer carries (see module), where the route set none."""

    def __init__(self, app: App) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        https = scope.get("scheme") == "https"

        async def send_with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers = list(message.get("headers") or [])
                present = {k.lower() for k, _ in headers}
                if b"x-content-type-options" not in present:
                    headers.append((b"x-content-type-options", b"nosniff"))
                if b"cache-control" not in present:
                    headers.append((b"cache-control", b"no-store"))
                if https and b"strict-transport-security" not in present:
                    headers.append((b"strict-transport-security", HSTS.encode()))
                message = {**message, "headers": headers}
            await send(message)

        await self.app(scope, receive, send_with_headers)
