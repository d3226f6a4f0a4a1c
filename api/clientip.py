"""The client address used for rate limits, believing X-Forwarded-For only from trusted proxies."""

from __future__ import annotations

import ipaddress
from collections.abc import Sequence

from aiohttp import web

from config.settings import IPNetwork


def _trusted(address: str, proxies: Sequence[IPNetwork]) -> bool:
    try:
        ip = ipaddress.ip_address(address)
    except ValueError:
        return False
    return any(ip in network for network in proxies)


def client_ip(request: web.Request, proxies: Sequence[IPNetwork]) -> str:
    """The peer address; if the peer is a trusted proxy, the nearest untrusted X-Forwarded-For hop."""
    peer = request.remote or "unknown"
    if not proxies or not _trusted(peer, proxies):
        return peer
    hops = [hop.strip() for hop in request.headers.get("X-Forwarded-For", "").split(",") if hop.strip()]
    # Walk from the right: each hop was appended by the proxy after it, so the first
    # untrusted one from the right is the client as far as our proxies can vouch.
    for hop in reversed(hops):
        if not _trusted(hop, proxies):
            try:
                return str(ipaddress.ip_address(hop))
            except ValueError:
                return peer
    return hops[0] if hops else peer
