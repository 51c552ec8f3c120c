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
   network entry. Public is decided by an explicit list, not by the Python
   version's idea of "global" alone: every range of IANA's special-purpose
   registries for IPv4 and IPv6 is refused (`DENIED_V4`, `DENIED_V6`), IPv6
   must be global unicast (2000::/3), and an IPv6 address that embeds an IPv4
   one (mapped, NAT64 64:ff9b::/96, 6to4, Teredo) is judged by the IPv4
   address it carries, so an allowed name, or "*", cannot be pointed at the
   engine's own machine or network. The connection then goes to an address
   that passed, without a second resolution that could answer differently
   (DNS rebinding).
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
_GLOBAL_UNICAST = ipaddress.IPv6Network("2000::/3")

# IANA IPv4 Special-Purpose Address Registry (every entry, whether or not it is marked
# globally reachable: none is a place an http step has business calling), and multicast.
DENIED_V4: tuple[ipaddress.IPv4Network, ...] = tuple(
    ipaddress.IPv4Network(n)
    for n in (
        "0.0.0.0/8",  # "this network"
        "10.0.0.0/8",  # private
        "100.64.0.0/10",  # shared address space (CGNAT)
        "127.0.0.0/8",  # loopback
        "169.254.0.0/16",  # link local (cloud metadata services)
        "172.16.0.0/12",  # private
        "192.0.0.0/24",  # IETF protocol assignments (192.0.0.8, DS-Lite, NAT64 discovery)
        "192.0.2.0/24",  # documentation (TEST-NET-1)
        "192.31.196.0/24",  # AS112-v4
        "192.52.193.0/24",  # AMT
        "192.88.99.0/24",  # deprecated 6to4 relay anycast
        "192.168.0.0/16",  # private
        "192.175.48.0/24",  # direct delegation AS112 service
        "198.18.0.0/15",  # benchmarking
        "198.51.100.0/24",  # documentation (TEST-NET-2)
        "203.0.113.0/24",  # documentation (TEST-NET-3)
        "224.0.0.0/4",  # multicast
        "240.0.0.0/4",  # reserved (and 255.255.255.255, limited broadcast)
    )
)

# IANA IPv6 Special-Purpose Address Registry, and what lies outside global unicast that
# Python's `is_global` lets through (site-local fec0::/10, IPv4-compatible ::/96, the
# local-use translation prefix 64:ff9b:1::/48). Addresses outside 2000::/3 are refused
# in any case; these are listed so that the list says it, and is tested range by range.
# The forms that carry an IPv4 address (mapped, NAT64 64:ff9b::/96, 6to4 2002::/16,
# Teredo 2001::/32) are judged by that address before this list is looked at.
DENIED_V6: tuple[ipaddress.IPv6Network, ...] = tuple(
    ipaddress.IPv6Network(n)
    for n in (
        "::/96",  # unspecified, loopback and the deprecated IPv4-compatible addresses
        "::ffff:0:0/96",  # IPv4-mapped: judged by their IPv4 address, never as IPv6
        "64:ff9b:1::/48",  # local-use IPv4/IPv6 translation
        "100::/64",  # discard-only
        "100:0:0:1::/64",  # dummy prefix
        "2001::/23",  # IETF protocol assignments (Teredo, ORCHID, benchmarking, AMT...)
        "2001:db8::/32",  # documentation
        "2620:4f:8000::/48",  # direct delegation AS112 service
        "3fff::/20",  # documentation
        "5f00::/16",  # segment routing (SRv6) SIDs
        "fc00::/7",  # unique local
        "fe80::/10",  # link local
        "fec0::/10",  # site local (deprecated)
        "ff00::/8",  # multicast
    )
)


def parse_address(text: str) -> IPAddress | None:
    """The address if `text` is one (IPv6 without brackets or zone), else None."""
    try:
        return ipaddress.ip_address(text)
    except ValueError:
        return None


def embedded_ipv4(address: IPAddress) -> ipaddress.IPv4Address | None:
    """The IPv4 address an IPv6 address stands for (mapped, 6to4, NAT64, Teredo's
    client), if any."""
    if isinstance(address, ipaddress.IPv4Address):
        return None
    if address.ipv4_mapped is not None:
        return address.ipv4_mapped
    if address.sixtofour is not None:
        return address.sixtofour
    if address in _NAT64:
        return ipaddress.IPv4Address(int(address) & 0xFFFFFFFF)
    if address.teredo is not None:
        return address.teredo[1]
    return None


def is_public(address: IPAddress) -> bool:
    """True for an address of the public internet: outside every special-purpose range,
    and, for an IPv6 address that carries an IPv4 one, that IPv4 address public too."""
    if isinstance(address, ipaddress.IPv4Address):
        return address.is_global and not any(address in n for n in DENIED_V4)
    inner = embedded_ipv4(address)
    if inner is not None:  # judged by what it carries (Teredo: its server and its client)
        teredo = address.teredo
        return is_public(inner) and (teredo is None or is_public(teredo[0]))
    return (
        address in _GLOBAL_UNICAST
        and address.is_global
        and not any(address in n for n in DENIED_V6)
    )


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
