"""Whether an address may be fetched from on a client's behalf: public unicast only.

Python's ``is_global`` is not enough on its own (3.11 passes ``192.0.0.192``,
``64:ff9b::a9fe:a9fe``, ``2002:a9fe:a9fe::`` and ``::127.0.0.1``), so an explicit deny
list of special-purpose ranges (IANA's registries) comes first, and an IPv6 address
that carries an IPv4 address (mapped, translated, 6to4) is judged by that address.
"""

from __future__ import annotations

import ipaddress

Address = ipaddress.IPv4Address | ipaddress.IPv6Address

_DENIED_V4 = tuple(
    ipaddress.IPv4Network(n)
    for n in (
        "0.0.0.0/8",  # "this network"
        "10.0.0.0/8",
        "100.64.0.0/10",  # carrier-grade NAT
        "127.0.0.0/8",
        "169.254.0.0/16",  # link-local, cloud metadata
        "172.16.0.0/12",
        "192.0.0.0/24",  # IETF protocol assignments (is_global misses 192.0.0.9, .10, .192…)
        "192.0.2.0/24",  # documentation
        "192.31.196.0/24",  # AS112
        "192.52.193.0/24",  # AMT
        "192.88.99.0/24",  # 6to4 relay anycast
        "192.168.0.0/16",
        "192.175.48.0/24",  # AS112 direct delegation
        "198.18.0.0/15",  # benchmarking
        "198.51.100.0/24",  # documentation
        "203.0.113.0/24",  # documentation
        "224.0.0.0/4",  # multicast
        "240.0.0.0/4",  # reserved, and the broadcast address
    )
)

_DENIED_V6 = tuple(
    ipaddress.IPv6Network(n)
    for n in (
        "::/96",  # unspecified, loopback, IPv4-compatible (::a.b.c.d)
        "64:ff9b::/96",  # NAT64: reaches whatever IPv4 address it embeds
        "64:ff9b:1::/48",  # local-use NAT64
        "100::/64",  # discard
        "2001::/23",  # IETF protocol assignments, Teredo (2001::/32) among them
        "2001:db8::/32",  # documentation
        "3fff::/20",  # documentation
        "5f00::/16",  # segment routing
        "fc00::/7",  # unique local
        "fe80::/10",  # link-local
        "fec0::/10",  # site-local
        "ff00::/8",  # multicast
    )
)
_SIXTOFOUR = ipaddress.IPv6Network("2002::/16")
_TRANSLATED = ipaddress.IPv6Network("::ffff:0:0:0/96")  # SIIT IPv4-translated


def refusal(address: Address) -> str | None:
    """Why ``address`` must not be fetched from, or None when it is public unicast."""
    if isinstance(address, ipaddress.IPv6Address):
        embedded = _embedded_ipv4(address)
        if embedded is not None:
            reason = refusal(embedded)
            return f"it carries {embedded}, which is {reason}" if reason else None
        if any(address in net for net in _DENIED_V6):
            return "a special-purpose IPv6 address"
    elif any(address in net for net in _DENIED_V4):
        return "a private or special-purpose IPv4 address"
    if not address.is_global:
        return "not a public address"
    return None


def _embedded_ipv4(address: ipaddress.IPv6Address) -> ipaddress.IPv4Address | None:
    if address.ipv4_mapped is not None:  # ::ffff:a.b.c.d
        return address.ipv4_mapped
    if address.sixtofour is not None:  # 2002:AABB:CCDD::/48 routes to a.b.c.d
        return address.sixtofour
    if address in _TRANSLATED:
        return ipaddress.IPv4Address(int(address) & 0xFFFFFFFF)
    return None


__all__ = ["Address", "refusal"]
