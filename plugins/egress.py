"""The egress guard: outbound HTTP to URLs a caller or an agent controls.

Modelled on Smokescreen: resolve the host, refuse if any address is internal,
then connect to the vetted address (never resolving the name again, so DNS
rebinding cannot switch it), and vet every redirect hop the same way (each hop
passes through the transport). Decimal, octal and hex spellings of addresses
resolve to the same addresses and are judged as such.
"""

from __future__ import annotations

import asyncio
import functools
import ipaddress
import socket
import ssl
from typing import Any

import certifi
import httpx

from plugins import tracing

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address

# Beyond what `is_global` excludes: IPv6 forms that embed an IPv4 address. An embedded
# address is refused even when the IPv4 inside is public: a translator on the path may
# deliver it anywhere, and no public service needs to be named that way.
EMBEDDING_V6 = (
    ipaddress.ip_network("::/96"),  # IPv4-compatible (deprecated), ::a.b.c.d
    ipaddress.ip_network("::ffff:0:0/96"),  # IPv4-mapped
    ipaddress.ip_network("::ffff:0:0:0/96"),  # SIIT IPv4-translated, ::ffff:0:a.b.c.d
    ipaddress.ip_network("64:ff9b::/96"),  # NAT64
    ipaddress.ip_network("64:ff9b:1::/48"),  # local-use NAT64
    ipaddress.ip_network("2002::/16"),  # 6to4
    ipaddress.ip_network("2001::/32"),  # Teredo
)
# The only IPv6 range IANA allocates for global unicast; everything outside it is refused.
GLOBAL_UNICAST_V6 = ipaddress.ip_network("2000::/3")
# Ranges Python's `is_global` (3.11) still calls global but that are not plain unicast hosts.
NOT_PLAIN_GLOBAL = (
    ipaddress.ip_network("3fff::/20"),  # documentation (RFC 9637)
    ipaddress.ip_network("192.0.0.0/24"),  # IETF protocol assignments (dummy, PCP/TURN anycast)
    ipaddress.ip_network("192.88.99.0/24"),  # 6to4 relay anycast (deprecated)
)
ALLOWED_SCHEMES = frozenset({"http", "https"})
DEFAULT_TIMEOUT = httpx.Timeout(30.0, connect=10.0)


class EgressDenied(Exception):
    """The destination is not allowed. `reason` names why without naming the host."""

    def __init__(self, message: str, reason: str | None = None) -> None:
        super().__init__(message)
        self.reason = reason or message


def denial_reason(ip: IPAddress) -> str | None:
    """Why an address may not be reached, or None when it is plainly global unicast.

    An allow-list at heart: IPv6 must lie in 2000::/3 and IPv4 must be global; the named
    classes before that only give the refusal a more useful reason.
    """
    if ip.is_loopback:
        return "a loopback address"
    if ip.is_unspecified:
        return "an unspecified address"
    if isinstance(ip, ipaddress.IPv6Address):
        if ip.ipv4_mapped is not None and denial_reason(ip.ipv4_mapped) is not None:
            return denial_reason(ip.ipv4_mapped)
        if any(ip in network for network in EMBEDDING_V6):
            return "an IPv6 address embedding IPv4"
        if ip.is_site_local:
            return "a site-local address"
    if ip.is_link_local:
        return "a link-local or metadata address"
    if ip.is_multicast:
        return "a multicast address"
    if isinstance(ip, ipaddress.IPv6Address) and ip not in GLOBAL_UNICAST_V6:
        return "a private or reserved address"
    if ip.is_private or not ip.is_global or any(ip in network for network in NOT_PLAIN_GLOBAL):
        return "a private or reserved address"
    return None


async def resolve(host: str, port: int) -> list[IPAddress]:
    """Every address the host resolves to (an address literal resolves to itself, without the
    resolver: the event loop's `getaddrinfo` runs in a worker thread even for a literal, a thread
    hop on every model call to a configured address). Other spellings that name an address
    (`2130706433`, `0x7f.1`) are not literals here: the resolver turns them into one, then vetted."""
    try:
        return [ipaddress.ip_address(host)]
    except ValueError:
        pass
    loop = asyncio.get_running_loop()
    try:
        infos = await loop.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except (socket.gaierror, UnicodeError):
        raise EgressDenied(f"cannot resolve host {host!r}", "the host cannot be resolved") from None
    return list(dict.fromkeys(ipaddress.ip_address(info[4][0]) for info in infos))


async def vet(url: httpx.URL, allow_private: bool) -> IPAddress:
    """The address to connect to for the URL; EgressDenied when it is not allowed."""
    if url.scheme not in ALLOWED_SCHEMES:
        raise EgressDenied(f"scheme {url.scheme!r} is not allowed (http or https only)")
    if not url.host:
        raise EgressDenied("the URL has no host")
    port = url.port or (443 if url.scheme == "https" else 80)
    addresses = await resolve(url.host, port)
    if not allow_private:
        for address in addresses:
            reason = denial_reason(address)
            if reason is not None:
                raise EgressDenied(f"{url.host} resolves to {reason}", f"the host resolves to {reason}")
    return addresses[0]


@functools.cache
def tls_context() -> ssl.SSLContext:
    """One verifying TLS context for every client: loading the CA bundle costs ~45 ms each time."""
    return ssl.create_default_context(cafile=certifi.where())


class EgressTransport(httpx.AsyncBaseTransport):
    """An httpx transport that vets each request's destination and connects to the vetted IP."""

    def __init__(self, allow_private: bool, inner: httpx.AsyncBaseTransport | None = None) -> None:
        self.allow_private = allow_private
        self._inner = inner or httpx.AsyncHTTPTransport(verify=tls_context())

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        """Vet, pin the address, forward; inside a trace, as a client span whose `traceparent` the
        request carries (every outbound request: agents', callbacks', providers')."""
        url = request.url
        with tracing.client_span(
            request.method, url.scheme, url.host, url.port, url.path, request.headers
        ) as span:
            try:
                response = await self._send(request)
            except EgressDenied as exc:
                span.event("svc.egress.denied", {"svc.egress.reason": exc.reason})
                span.fail("egress_denied", exc.reason)
                raise
            span.status_code(response.status_code)
            return response

    async def _send(self, request: httpx.Request) -> httpx.Response:
        """Vet, pin the address, forward."""
        host = request.url.host
        address = await vet(request.url, self.allow_private)
        request.url = request.url.copy_with(host=str(address))
        if request.url.scheme == "https":
            request.extensions = {**request.extensions, "sni_hostname": host}
        return await self._inner.handle_async_request(request)

    async def aclose(self) -> None:
        """Close the pooled connections."""
        await self._inner.aclose()


def egress_client(allow_private: bool, **options: Any) -> httpx.AsyncClient:
    """An httpx client whose every request (and redirect hop) passes the guard."""
    options.setdefault("timeout", DEFAULT_TIMEOUT)
    options.setdefault("follow_redirects", False)
    return httpx.AsyncClient(transport=EgressTransport(allow_private), **options)
