"""The special-purpose address ranges an `http` step may not reach without an explicit
entry: every range of IANA's IPv4 and IPv6 special-purpose registries, checked at its
first, middle and last address, and the IPv6 forms that carry an IPv4 address judged by
that address."""

from __future__ import annotations

import ipaddress

import pytest

from waypost.features.egress import DENIED_V4, DENIED_V6, AllowList, is_public

# Written out here rather than read from the module, so that a range dropped from the
# module's list fails a test. IANA IPv4 and IPv6 Special-Purpose Address Registries,
# plus multicast and the non-global IPv6 space Python's `is_global` lets through.
SPECIAL_V4 = [
    "0.0.0.0/8",
    "10.0.0.0/8",
    "100.64.0.0/10",
    "127.0.0.0/8",
    "169.254.0.0/16",
    "172.16.0.0/12",
    "192.0.0.0/24",
    "192.0.0.0/29",
    "192.0.0.8/32",
    "192.0.0.9/32",
    "192.0.0.10/32",
    "192.0.0.170/31",
    "192.0.2.0/24",
    "192.31.196.0/24",
    "192.52.193.0/24",
    "192.88.99.0/24",
    "192.168.0.0/16",
    "192.175.48.0/24",
    "198.18.0.0/15",
    "198.51.100.0/24",
    "203.0.113.0/24",
    "224.0.0.0/4",
    "240.0.0.0/4",
    "255.255.255.255/32",
]
SPECIAL_V6 = [
    "::1/128",
    "::/128",
    "::/96",  # IPv4-compatible (deprecated)
    "64:ff9b:1::/48",
    "100::/64",
    "100:0:0:1::/64",
    "2001::/23",
    "2001:1::1/128",
    "2001:1::2/128",
    "2001:2::/48",
    "2001:3::/32",
    "2001:4:112::/48",
    "2001:10::/28",
    "2001:20::/28",
    "2001:30::/28",
    "2001:db8::/32",
    "2620:4f:8000::/48",
    "3fff::/20",
    "5f00::/16",
    "fc00::/7",
    "fe80::/10",
    "fec0::/10",
    "ff00::/8",
]


def _samples(network: str) -> list[str]:
    net = ipaddress.ip_network(network)
    first, last = int(net.network_address), int(net.broadcast_address)
    kind = type(net.network_address)
    return [str(kind(n)) for n in sorted({first, (first + last) // 2, last})]


def _refused_everywhere_but_by_entry(address: str, network: str) -> None:
    assert not is_public(ipaddress.ip_address(address)), address
    # Neither "*" nor a host name lets a connection go there...
    assert not AllowList(["*", "*.example.com"]).permits(address, 443), address
    # ...an address or network entry that holds it does.
    assert AllowList([network]).permits(address, 443), address


@pytest.mark.parametrize("network", SPECIAL_V4)
def test_every_special_purpose_ipv4_range_is_refused(network: str) -> None:
    for address in _samples(network):
        _refused_everywhere_but_by_entry(address, network)


@pytest.mark.parametrize("network", SPECIAL_V6)
def test_every_special_purpose_ipv6_range_is_refused(network: str) -> None:
    for address in _samples(network):
        if address in ("2001::", "2001:0:ffff:ffff:ffff:ffff:ffff:ffff"):
            continue  # Teredo addresses are judged by the IPv4 they carry (below)
        _refused_everywhere_but_by_entry(address, network)


@pytest.mark.parametrize("network", [str(n) for n in (*DENIED_V4, *DENIED_V6)])
def test_each_range_of_the_modules_lists_is_refused(network: str) -> None:
    for address in _samples(network):
        net = ipaddress.ip_network(network)
        if net.version == 6 and ipaddress.ip_address(address) in ipaddress.ip_network("2001::/32"):
            continue  # Teredo: judged by the IPv4 addresses it carries
        if network == "::ffff:0:0/96" and address != "::ffff:0.0.0.0":
            continue  # mapped: judged by the IPv4 address (the middle one is public)
        assert not is_public(ipaddress.ip_address(address)), address


@pytest.mark.parametrize(
    "address",
    [
        "64:ff9b:1::a00:1",  # local-use translation of 10.0.0.1
        "64:ff9b:1:ffff::1",
        "fec0::1",  # site local
        "::7f00:1",  # IPv4-compatible 127.0.0.1
        "::808:808",  # IPv4-compatible 8.8.8.8: deprecated, never routed
        "192.0.0.8",  # IPv4 dummy address
        "5f00::1",
        "3fff::1",
        "100:0:0:1::1",
    ],
)
def test_the_addresses_the_review_found_getting_through_are_refused(address: str) -> None:
    assert ipaddress.ip_address(address).is_global  # what Python's own check says
    assert not is_public(ipaddress.ip_address(address))
    assert not AllowList(["*"]).permits(address, 443)


def _teredo(server: str, client: str) -> str:
    server_bits = int(ipaddress.IPv4Address(server))
    client_bits = int(ipaddress.IPv4Address(client)) ^ 0xFFFFFFFF
    value = (0x20010000 << 96) | (server_bits << 64) | (0x8000 << 48) | (0xFFFF << 32)
    return str(ipaddress.IPv6Address(value | client_bits))


@pytest.mark.parametrize(
    ("address", "public"),
    [
        ("::ffff:8.8.8.8", True),
        ("::ffff:192.0.0.8", False),
        ("64:ff9b::808:808", True),  # NAT64 of 8.8.8.8
        ("64:ff9b::c000:8", False),  # NAT64 of 192.0.0.8
        ("64:ff9b::a9fe:a9fe", False),  # NAT64 of 169.254.169.254
        ("2002:808:808::1", True),  # 6to4 of 8.8.8.8
        ("2002:c000:8::1", False),  # 6to4 of 192.0.0.8
        ("2002:c612:1::1", False),  # 6to4 of 198.18.0.1 (benchmarking)
        (_teredo("65.54.227.120", "8.8.4.4"), True),
        (_teredo("65.54.227.120", "127.0.0.1"), False),
        (_teredo("65.54.227.120", "192.168.1.1"), False),
        (_teredo("10.0.0.1", "8.8.4.4"), False),
    ],
)
def test_ipv6_forms_that_carry_an_ipv4_address_are_judged_by_it(address: str, public: bool) -> None:
    assert is_public(ipaddress.ip_address(address)) is public
    assert AllowList(["*"]).permits(address, 443) is public


def test_an_embedded_private_address_is_reached_through_an_entry_for_its_ipv4_network() -> None:
    assert AllowList(["10.0.0.0/8"]).permits("64:ff9b::a00:1", 443)
    assert AllowList(["127.0.0.1"]).permits(_teredo("65.54.227.120", "127.0.0.1"), 443)


@pytest.mark.parametrize(
    "address",
    ["8.8.8.8", "1.1.1.1", "93.184.216.34", "2606:4700:4700::1111", "2a00:1450:4001::200e"],
)
def test_public_addresses_stay_public(address: str) -> None:
    assert is_public(ipaddress.ip_address(address))
    assert AllowList(["*"]).permits(address, 443)
