"""The client address used for rate limits, believing X-Forwarded-For only from trusted proxies."""

from __future__ import annotations

import ipaddress
from collections.abc import Sequence

from aiohttp import web

from config.parsing import IPNetwork


def _trusted(address: str, proxies: Sequence[IPNetwork]) -> bool:
    try:
        ip = ipaddress.ip_address(address)
    except ValueError:
        return False
    return any(ip in network for network in proxies)


def bucket(address: str) -> str:
    """The rate-limit key of an address: IPv6 clients are counted per /64 (one subscriber's block)."""
    try:
        ip = ipaddress.ip_address(address)
    except ValueError:
        return address
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is None:
        return str(ipaddress.ip_network(f"{ip}/64", strict=False))
    return str(ip.ipv4_mapped or ip) if isinstance(ip, ipaddress.IPv6Address) else str(ip)


def client_ip(request: web.Request, proxies: Sequence[IPNetwork]) -> str:
    """The client's rate-limit key: the peer, or behind trusted proxies the nearest untrusted hop."""
    return bucket(_client_address(request, proxies))


def _client_address(request: web.Request, proxies: Sequence[IPNetwork]) -> str:
    peer = request.remote or "unknown"
    if not proxies or not _trusted(peer, proxies):
        return peer
    # Every X-Forwarded-For line counts: a proxy may append its own line after a forged one.
    header = ",".join(request.headers.getall("X-Forwarded-For", []))
    hops = [hop.strip() for hop in header.split(",") if hop.strip()]
    # Walk from the right: each hop was appended by the proxy after it, so the first
    # untrusted one from the right is the client as far as our proxies can vouch.
    for hop in reversed(hops):
        if not _trusted(hop, proxies):
            try:
                return str(ipaddress.ip_address(hop))
            except ValueError:
                return peer
    return hops[0] if hops else peer
