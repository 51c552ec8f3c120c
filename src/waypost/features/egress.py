"""Where `http` steps may connect: the allow-list of hosts, addresses and networks.

Entries: a host name ("api.example.com"), its subdomains ("*.example.com",
which does not admit example.com itself), any host name ("*"), an address
("203.0.113.7", "::1", "[2001:db8::1]") or a network ("10.0.0.0/8",
"fc00::/7"). Host names and addresses may carry a port ("api.example.com:8443",
"127.0.0.1:8080", "[::1]:8080"); without one, any port.

A call must pass two checks:

1. Its URL's host is admitted: a name by a name entry or "*"; an address
   literal by "*", an entry of that address, or a network holding it.
2. Each address the host resolves to is public, or is named by an address or
   network entry. Loopback, private, link-local, unique-local, shared (CGNAT),
   unspecified, multicast and reserved addresses are refused otherwise (an
   IPv6 address that embeds an IPv4 one is judged by the IPv4 address), so an
   allowed name, or "*", cannot be pointed at the engine's own machine or
   network. The connection then goes to an address that passed, without a
   second resolution that could answer differently (DNS rebinding).
"""

from __future__ import annotations

import ipaddress
import urllib.parse
from collections.abc import Collection
from dataclasses import dataclass

from waypost.errors import ConfigurationError

from .outbound import Resolver

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network

_NAT64 = ipaddress.IPv6Network("64:ff9b::/96")


def parse_address(text: str) -> IPAddress | None:
    """The address if `text` is one (IPv6 without brackets or zone), else None."""
    try:
        return ipaddress.ip_address(text)
    except ValueError:
        return None


def embedded_ipv4(address: IPAddress) -> ipaddress.IPv4Address | None:
    """The IPv4 address an IPv6 address stands for (mapped, 6to4, NAT64), if any."""
    if isinstance(address, ipaddress.IPv4Address):
        return None
    if address.ipv4_mapped is not None:
        return address.ipv4_mapped
    if address.sixtofour is not None:
        return address.sixtofour
    if address in _NAT64:
        return ipaddress.IPv4Address(int(address) & 0xFFFFFFFF)
    return None


def is_public(address: IPAddress) -> bool:
    """True for an address of the public internet (not local, private or special)."""
    inner = embedded_ipv4(address)
    if inner is not None:
        return is_public(inner)
    return address.is_global and not address.is_multicast


@dataclass(frozen=True, slots=True)
class _Name:
    host: str  # "*" for any host name; "*.example.com" for its subdomains
    port: int | None  # None: any port

    def admits(self, host: str, port: int) -> bool:
        if self.port is not None and self.port != port:
            return False
        if self.host == "*":
            return True
        if self.host.startswith("*."):
            return host.endswith(self.host[1:])
        return host == self.host


@dataclass(frozen=True, slots=True)
class _Network:
    network: IPNetwork
    port: int | None

    def covers(self, address: IPAddress, port: int) -> bool:
        if self.port is not None and self.port != port:
            return False
        inner = embedded_ipv4(address)
        return address in self.network or (inner is not None and inner in self.network)


@dataclass(frozen=True, slots=True)
class Addresses:
    """What a host resolved to: the addresses a call may connect to, and the others."""

    permitted: list[str]
    refused: list[str]


class AllowList:
    """The hosts, addresses and networks `http` steps may reach (nothing when empty)."""

    def __init__(self, entries: Collection[str] | None) -> None:
        if isinstance(entries, str):
            raise ConfigurationError(
                "http allow-list must be a collection of hosts, not one string"
            )
        self.names: list[_Name] = []
        self.networks: list[_Network] = []
        for entry in entries or ():
            parsed = _parse(entry)
            if isinstance(parsed, _Name):
                self.names.append(parsed)
            else:
                self.networks.append(parsed)

    def admits(self, host: str, port: int) -> bool:
        """Whether a URL's host (lower case, IDNA) and port may be called at all."""
        address = parse_address(host)
        if address is not None:
            return any(n.host == "*" and n.admits(host, port) for n in self.names) or any(
                n.covers(address, port) for n in self.networks
            )
        return any(n.admits(host, port) for n in self.names)

    def permits(self, address: str, port: int) -> bool:
        """Whether a connection may go to this address: a public one, or one named here."""
        parsed = parse_address(address)
        if parsed is None:
            return False
        return is_public(parsed) or any(n.covers(parsed, port) for n in self.networks)

    async def addresses(self, resolver: Resolver, key: str, host: str, port: int) -> Addresses:
        """Resolve `host` once (a lookup of `key`) and split its addresses into permitted
        and refused."""
        if parse_address(host) is not None:
            found = [host]
        else:
            found = await resolver.addresses(key, host, port)
        return Addresses(
            permitted=[a for a in found if self.permits(a, port)],
            refused=[a for a in found if not self.permits(a, port)],
        )


def _normal_host(host: str) -> str:
    host = host.lower().rstrip(".")
    wildcard = host.startswith("*.")
    rest = host[2:] if wildcard else host
    if rest and rest != "*" and not rest.isascii():
        try:
            rest = rest.encode("idna").decode("ascii")
        except UnicodeError:
            rest = ""
    return ("*." if wildcard else "") + rest


def _bad(entry: str) -> ConfigurationError:
    return ConfigurationError(
        f"http allow-list entry {entry!r} is not 'host', '*.domain', 'host:port', '*', "
        "an address ('10.0.0.7', '[::1]:8080') or a network ('10.0.0.0/8')"
    )


def _parse(entry: str) -> _Name | _Network:
    text = entry.strip()
    if text == "*":
        return _Name("*", None)
    if "/" in text:
        try:
            return _Network(ipaddress.ip_network(text, strict=False), None)
        except ValueError:
            raise _bad(entry) from None
    bare = parse_address(text)
    if bare is not None:  # an IPv4 address, or IPv6 without brackets
        return _Network(ipaddress.ip_network(bare), None)
    parts = urllib.parse.urlsplit("//" + text)
    try:
        port = parts.port
    except ValueError:
        raise _bad(entry) from None
    host = _normal_host(parts.hostname or "")
    if not host or parts.path or parts.username is not None or "*" in host.removeprefix("*."):
        raise _bad(entry)
    address = parse_address(host)
    if address is not None:
        return _Network(ipaddress.ip_network(address), port)
    return _Name(host, port)
