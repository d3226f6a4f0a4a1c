"""The egress guard refuses internal destinations in every spelling and pins the vetted address."""

from __future__ import annotations

import ipaddress

import httpx
import pytest
from aiohttp import web

from plugins.egress import EgressDenied, EgressTransport, denial_reason, egress_client, vet

DENIED = [
    "127.0.0.1",
    "10.1.2.3",
    "172.16.0.1",
    "192.168.1.1",
    "169.254.169.254",
    "100.64.0.1",
    "0.0.0.0",
    "224.0.0.1",
    "::1",
    "fc00::1",
    "fe80::1",
    "::",
    "::ffff:127.0.0.1",
    "::ffff:10.0.0.1",
    "64:ff9b::a00:1",
    "2002:a00:1::",
    "240.0.0.1",
    "255.255.255.255",
]
ALLOWED = ["8.8.8.8", "1.1.1.1", "2606:4700:4700::1111", "93.184.216.34"]


@pytest.mark.parametrize("address", DENIED)
def test_internal_addresses_are_denied(address):
    assert denial_reason(ipaddress.ip_address(address)) is not None


@pytest.mark.parametrize("address", ALLOWED)
def test_public_addresses_are_allowed(address):
    assert denial_reason(ipaddress.ip_address(address)) is None


# Every form of address the guard must judge, with the reason it gives (None: allowed).
# Tested on `denial_reason` itself so no URL parser or resolver can make a row pass.
ADDRESS_TABLE: list[tuple[str, str | None]] = [
    # IPv4
    ("127.0.0.1", "a loopback address"),
    ("127.255.255.254", "a loopback address"),
    ("0.0.0.0", "an unspecified address"),
    ("0.1.2.3", "a private or reserved address"),
    ("10.0.0.1", "a private or reserved address"),
    ("172.16.0.1", "a private or reserved address"),
    ("172.31.255.255", "a private or reserved address"),
    ("192.168.0.1", "a private or reserved address"),
    ("100.64.0.1", "a private or reserved address"),
    ("100.127.255.254", "a private or reserved address"),
    ("169.254.169.254", "a link-local or metadata address"),
    ("192.0.0.8", "a private or reserved address"),
    ("192.0.2.1", "a private or reserved address"),
    ("192.88.99.1", "a private or reserved address"),
    ("198.18.0.1", "a private or reserved address"),
    ("198.51.100.1", "a private or reserved address"),
    ("203.0.113.1", "a private or reserved address"),
    ("224.0.0.1", "a multicast address"),
    ("239.255.255.250", "a multicast address"),
    ("240.0.0.1", "a private or reserved address"),
    ("255.255.255.255", "a private or reserved address"),
    ("8.8.8.8", None),
    ("1.1.1.1", None),
    ("93.184.216.34", None),
    # IPv6 special addresses
    ("::", "an unspecified address"),
    ("::1", "a loopback address"),
    ("fe80::1", "a link-local or metadata address"),
    ("febf::1", "a link-local or metadata address"),
    ("fec0::1", "a site-local address"),
    ("feff::1", "a site-local address"),
    ("fc00::1", "a private or reserved address"),
    ("fd12:3456::1", "a private or reserved address"),
    ("ff02::1", "a multicast address"),
    ("ff0e::1", "a multicast address"),
    ("100::1", "a private or reserved address"),
    ("2001:db8::1", "a private or reserved address"),
    ("2001:2::1", "a private or reserved address"),
    ("2001:10::1", "a private or reserved address"),
    ("3fff::1", "a private or reserved address"),
    ("4000::1", "a private or reserved address"),
    ("5f00::1", "a private or reserved address"),
    ("e000::1", "a private or reserved address"),
    # IPv6 forms embedding IPv4, with an internal and with a public IPv4 inside
    ("::ffff:127.0.0.1", "a loopback address"),
    ("::ffff:10.0.0.1", "a private or reserved address"),
    ("::ffff:169.254.169.254", "a link-local or metadata address"),
    ("::ffff:8.8.8.8", "an IPv6 address embedding IPv4"),
    ("::127.0.0.1", "an IPv6 address embedding IPv4"),
    ("::10.0.0.1", "an IPv6 address embedding IPv4"),
    ("::8.8.8.8", "an IPv6 address embedding IPv4"),
    ("::ffff:0:127.0.0.1", "an IPv6 address embedding IPv4"),
    ("::ffff:0:8.8.8.8", "an IPv6 address embedding IPv4"),
    ("64:ff9b::7f00:1", "an IPv6 address embedding IPv4"),
    ("64:ff9b::808:808", "an IPv6 address embedding IPv4"),
    ("64:ff9b:1::a00:1", "an IPv6 address embedding IPv4"),
    ("2002:7f00:1::", "an IPv6 address embedding IPv4"),
    ("2002:808:808::", "an IPv6 address embedding IPv4"),
    ("2001:0:4136:e378:8000:63bf:3fff:fdd2", "an IPv6 address embedding IPv4"),
    # global unicast IPv6
    ("2606:4700:4700::1111", None),
    ("2001:4860:4860::8888", None),
    ("2a00:1450:4001:80b::200e", None),
]


@pytest.mark.parametrize(("address", "reason"), ADDRESS_TABLE)
def test_the_address_table(address, reason):
    assert denial_reason(ipaddress.ip_address(address)) == reason


@pytest.mark.parametrize(
    "url",
    [
        "http://127.0.0.1/",
        "http://2130706433/",
        "http://0x7f000001/",
        "http://0177.0.0.1/",
        "http://127.1/",
        "http://localhost:8080/x",
        "http://[::1]/",
        "http://[::ffff:7f00:1]/",
        "http://169.254.169.254/latest/meta-data/",
    ],
)
async def test_every_spelling_of_an_internal_address_is_refused(url):
    # httpx itself refuses some spellings (octal) as invalid URLs; either way nothing is sent.
    with pytest.raises((EgressDenied, httpx.InvalidURL)):
        await vet(httpx.URL(url), allow_private=False)


@pytest.mark.parametrize("url", ["ftp://example.com/", "file:///etc/passwd", "http:///nohost"])
async def test_only_http_and_https_with_a_host(url):
    with pytest.raises(EgressDenied):
        await vet(httpx.URL(url), allow_private=False)


async def test_allow_private_lets_loopback_through(aiohttp_server):
    async def hello(request: web.Request) -> web.Response:
        return web.json_response({"host": request.headers["Host"]})

    app = web.Application()
    app.router.add_get("/hello", hello)
    server = await aiohttp_server(app)
    url = f"http://localhost:{server.port}/hello"
    async with egress_client(allow_private=True) as client:
        response = await client.get(url)
        assert response.json() == {"host": f"localhost:{server.port}"}, "Host header keeps the name"
    async with egress_client(allow_private=False) as client:
        with pytest.raises(EgressDenied):
            await client.get(url)


async def test_redirects_are_vetted_hop_by_hop(aiohttp_server):
    async def bounce(request: web.Request) -> web.Response:
        raise web.HTTPFound("gopher://127.0.0.1/")

    app = web.Application()
    app.router.add_get("/bounce", bounce)
    server = await aiohttp_server(app)
    async with egress_client(allow_private=True, follow_redirects=True) as client:
        with pytest.raises((EgressDenied, httpx.UnsupportedProtocol)):
            await client.get(f"http://127.0.0.1:{server.port}/bounce")


async def test_a_redirect_to_an_internal_address_is_refused_when_private_is_denied(aiohttp_server):
    seen = []

    async def bounce(request: web.Request) -> web.Response:
        seen.append(request.path)
        raise web.HTTPFound("http://169.254.169.254/latest/meta-data/")

    app = web.Application()
    app.router.add_get("/bounce", bounce)
    server = await aiohttp_server(app)
    transport = EgressTransport(allow_private=True)
    async with httpx.AsyncClient(transport=transport, follow_redirects=True) as client:
        first = client.build_request("GET", f"http://127.0.0.1:{server.port}/bounce")
        response = await client.send(first, follow_redirects=False)
        assert response.status_code == 302 and seen == ["/bounce"]
        transport.allow_private = False
        with pytest.raises(EgressDenied):
            await client.send(client.build_request("GET", response.headers["Location"]))
