"""The egress guard refuses internal destinations in every spelling and pins the vetted address."""

from __future__ import annotations

import asyncio
import ipaddress
import socket
import ssl
from dataclasses import dataclass
from typing import Any

import httpx
import pytest
from aiohttp import web

from plugins.egress import (
    DEFAULT_TIMEOUT,
    EgressDenied,
    EgressTransport,
    denial_reason,
    egress_client,
    vet,
)

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


@dataclass(frozen=True)
class RawURL:
    """A URL as the guard reads it (scheme, host, port), built without httpx's parser: httpx refuses
    some spellings (octal) itself, and the guard must refuse them without relying on that."""

    scheme: str
    host: str
    port: int | None = None


SPELLINGS = [
    "127.0.0.1",
    "2130706433",
    "0x7f000001",
    "0177.0.0.1",
    "0177.1",
    "127.1",
    "0x7f.1",
    "localhost",
    "::1",
    "::ffff:7f00:1",
    "169.254.169.254",
    "0251.0376.0251.0376",
]


@pytest.mark.parametrize("host", SPELLINGS)
async def test_every_spelling_of_an_internal_address_is_refused_by_the_guard(host):
    with pytest.raises(EgressDenied):
        await vet(RawURL("http", host), allow_private=False)  # type: ignore[arg-type]


@pytest.mark.parametrize("host", [h for h in SPELLINGS if not h.startswith("0") or h.startswith("0x")])
async def test_spellings_httpx_parses_are_refused_too(host):
    url = f"http://[{host}]/" if ":" in host else f"http://{host}/"
    with pytest.raises(EgressDenied):
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


def public_upstream(seen: list[str]) -> httpx.MockTransport:
    """What the guard forwards to once it has vetted a hop: 93.184.216.34 redirects, anything
    else answers 200 (so a hop the guard failed to stop shows up as a response, not an error)."""

    def answer(request: httpx.Request) -> httpx.Response:
        seen.append(str(request.url))
        if request.url.host == "93.184.216.34" and request.url.path == "/bounce":
            return httpx.Response(302, headers={"Location": "http://127.0.0.1/admin"})
        return httpx.Response(200, text="reached")

    return httpx.MockTransport(answer)


async def test_redirects_are_vetted_hop_by_hop():
    seen: list[str] = []
    transport = EgressTransport(allow_private=False, inner=public_upstream(seen))
    async with httpx.AsyncClient(transport=transport, follow_redirects=True) as client:
        with pytest.raises(EgressDenied):
            await client.get("http://93.184.216.34/bounce")
    assert seen == ["http://93.184.216.34/bounce"], "the internal hop never left the guard"


@pytest.mark.parametrize("url", ["gopher://93.184.216.34/", "ftp://93.184.216.34/", "file://93.184.216.34/x"])
async def test_the_guard_itself_refuses_a_hop_to_another_scheme(url):
    """httpx refuses a redirect to gopher:// before any transport sees it; the guard must not rely
    on that (another client, or a later httpx, may not): its transport is called directly here."""
    seen: list[str] = []
    transport = EgressTransport(allow_private=False, inner=public_upstream(seen))
    with pytest.raises(EgressDenied, match="scheme"):
        await transport.handle_async_request(httpx.Request("GET", url))
    assert seen == []


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


class RebindingLoop(asyncio.SelectorEventLoop):
    """An event loop whose resolver answers `rebind.test` with 127.0.0.1 the first time and with
    127.0.0.2 (where nothing listens) afterwards: a DNS-rebinding attacker's name server, at the
    seam every asyncio client resolves through."""

    def __init__(self) -> None:
        super().__init__()
        self.lookups: list[str] = []

    async def getaddrinfo(self, host: Any, port: Any, **kw: Any) -> Any:  # type: ignore[override]
        if host == "rebind.test":
            self.lookups.append(host)
            host = "127.0.0.1" if len(self.lookups) == 1 else "127.0.0.2"
        return await super().getaddrinfo(host, port, **kw)


def test_the_vetted_address_is_the_one_connected_to():
    """DNS pinning: the guard resolves the name once and connects to that address; resolving it
    again (as a plain client would) reaches the rebound address instead."""

    async def scenario(loop: RebindingLoop) -> tuple[int, str, str]:
        async def vetted(request: web.Request) -> web.Response:
            return web.Response(text=request.headers["Host"])

        app = web.Application()
        app.router.add_get("/", vetted)
        runner = web.AppRunner(app)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        port = runner.addresses[0][1]
        try:
            async with egress_client(allow_private=True) as client:
                response = await client.get(f"http://rebind.test:{port}/")
                return response.status_code, response.text, f"rebind.test:{port}"
        finally:
            await runner.cleanup()

    loop = RebindingLoop()
    try:
        status, host_header, expected = loop.run_until_complete(scenario(loop))
    finally:
        loop.close()
    assert (status, host_header) == (200, expected), "the request reached the vetted address, by name"
    assert loop.lookups == ["rebind.test"], "the name was resolved once, by the guard"


# ---- what mutation testing found unguarded (docs/testing.md) ----------------------------------


def test_a_refusal_names_its_reason_and_never_the_host_in_it():
    assert EgressDenied("only a message").reason == "only a message"
    assert EgressDenied("host.example resolves to x", "the host resolves to x").reason == (
        "the host resolves to x"
    )


async def test_the_refusal_of_an_internal_host_gives_the_class_without_the_host():
    with pytest.raises(EgressDenied) as refused:
        await vet(RawURL("http", "127.0.0.1"), allow_private=False)  # type: ignore[arg-type]
    assert refused.value.reason == "the host resolves to a loopback address"
    assert str(refused.value) == "127.0.0.1 resolves to a loopback address"
    with pytest.raises(EgressDenied) as refused:
        await vet(httpx.URL("http:///nohost"), allow_private=False)
    assert str(refused.value) == refused.value.reason == "the URL has no host"


def test_an_unresolvable_host_is_refused_with_its_own_reason():
    class NoDNS(asyncio.SelectorEventLoop):
        async def getaddrinfo(self, host: Any, port: Any, **kw: Any) -> Any:  # type: ignore[override]
            raise socket.gaierror(socket.EAI_NONAME, "Name or service not known")

    loop = NoDNS()
    try:
        with pytest.raises(EgressDenied) as refused:
            loop.run_until_complete(vet(httpx.URL("http://nowhere.test/"), allow_private=False))
    finally:
        loop.close()
    assert refused.value.reason == "the host cannot be resolved"
    assert str(refused.value) == "cannot resolve host 'nowhere.test'"


@pytest.mark.parametrize(("scheme", "sni"), [("https", "localhost"), ("http", None)])
async def test_the_pinned_request_keeps_the_name_for_tls(scheme, sni):
    """Connecting to the vetted IP, TLS still verifies (and SNI still names) the host asked for."""
    seen: list[httpx.Request] = []

    def answer(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        return httpx.Response(200)

    transport = EgressTransport(allow_private=True, inner=httpx.MockTransport(answer))
    await transport.handle_async_request(httpx.Request("GET", f"{scheme}://localhost/"))
    assert ipaddress.ip_address(seen[0].url.host).is_loopback, "connected to the vetted address"
    assert seen[0].extensions.get("sni_hostname") == sni


def test_the_client_defaults_time_out_and_do_not_follow_redirects():
    client = egress_client(False, headers={"X-Probe": "1"})
    assert client.timeout == DEFAULT_TIMEOUT and client.follow_redirects is False
    assert client.headers["X-Probe"] == "1", "other options reach the client"
    assert egress_client(False, follow_redirects=True, timeout=5.0).follow_redirects is True


async def test_a_certificate_the_platform_does_not_trust_is_refused(aiohttp_server, tmp_path):
    """The guard's own transport verifies TLS: a self-signed server is refused."""
    cert, key = self_signed(tmp_path)
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(cert, key)
    app = web.Application()
    async def untrusted(request: web.Request) -> web.Response:
        return web.Response(text="untrusted")

    app.router.add_get("/", untrusted)
    server = await aiohttp_server(app, ssl=context)
    async with egress_client(allow_private=True) as client:
        with pytest.raises(httpx.ConnectError, match="CERTIFICATE_VERIFY_FAILED"):
            await client.get(f"https://localhost:{server.port}/")


def self_signed(directory: Any) -> tuple[str, str]:
    """A throwaway certificate and key for `localhost`, trusted by nobody."""
    from datetime import UTC, datetime, timedelta

    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "localhost")])
    now = datetime.now(UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - timedelta(days=1))
        .not_valid_after(now + timedelta(days=1))
        .add_extension(x509.SubjectAlternativeName([x509.DNSName("localhost")]), critical=False)
        .sign(key, hashes.SHA256())
    )
    cert_path, key_path = directory / "cert.pem", directory / "key.pem"
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        )
    )
    return str(cert_path), str(key_path)
