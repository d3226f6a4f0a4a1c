"""`svc doctor`: one cheap, real call to every dependency, printed as a table.

An operator runs it before (or instead of) guessing why `svc serve` misbehaves:
the database (pinged; the embedded one is joined, or started and stopped for
the check), Ray (joined or started, then asked for its resources), each LLM
provider with a key (its authenticated list-models call, which costs no
tokens), the SMTP server (connect, STARTTLS when offered, login, NOOP) and the
payment provider (an authenticated balance read), and each server of the MCP catalogue (started,
and asked for its tools). A dependency that is not
configured is reported as such, not as a failure. Nothing secret is printed:
no key, no password, no upstream error body. The exit code is 1 when any check
failed.
"""

from __future__ import annotations

import asyncio
import smtplib
import ssl
import sys
from collections.abc import Awaitable
from dataclasses import dataclass
from typing import TextIO
from urllib.parse import unquote, urlsplit

import httpx
import stripe

from actors.runtime import RayRuntime
from api.doctor_mcp import check_mcp
from config.settings import ProviderSettings, Settings
from svc.core import Store
from svc.subprocesses import EmbeddedMongo

TIMEOUT_S = 10.0
OK, FAILED, NOT_CONFIGURED = "ok", "FAILED", "not configured"
ANTHROPIC_VERSION = "2023-06-01"


@dataclass(frozen=True)
class Check:
    """One row of the table."""

    name: str
    status: str
    detail: str


def _where(uri: str) -> str:
    """host:port of a URL, without its credentials."""
    parts = urlsplit(uri)
    host = parts.hostname or "?"
    return f"{host}:{parts.port}" if parts.port else host


def where_db(settings: Settings) -> str:
    """The database's address for the table, without credentials."""
    if settings.mongodb_uri:
        return f"MongoDB at {_where(settings.mongodb_uri)}"
    return f"embedded ({settings.data_dir})"


async def check_database(settings: Settings) -> tuple[Check, str | None]:
    """Ping the configured MongoDB, or join (or start, then stop) the embedded one; the row and the URI."""
    embedded = (
        None if settings.mongodb_uri else EmbeddedMongo(settings.data_dir, sync=settings.embedded_db_sync)
    )
    try:
        if embedded is not None:
            uri = await embedded.start()
            kind = "embedded, running" if not embedded.owned else "embedded, started for the check"
            where = f"{kind} on port {embedded.port} ({settings.data_dir})"
        else:
            assert settings.mongodb_uri is not None
            uri, where = settings.mongodb_uri, where_db(settings)
        # Bounded by SVC_DB_TIMEOUT_SECONDS, as the service's own calls are.
        store = Store.connect(uri, settings.db_timeout_seconds)
        try:
            await store.client.admin.command("ping")
        finally:
            await store.close()
    except Exception as exc:  # any failure is the check's answer
        if embedded is not None:
            await embedded.stop()
        return Check("database", FAILED, f"{where_db(settings)}: {type(exc).__name__}"), None
    if embedded is not None:
        await embedded.stop()
    return Check("database", OK, where), uri


async def check_ray(settings: Settings, mongodb_uri: str | None) -> Check:
    """Join SVC_RAY_ADDRESS (or start a local Ray, as `svc serve` would) and ask for its resources."""
    # No settings: the check only asks Ray for its resources and publishes nothing, so it never
    # replaces (or, stopping its own local Ray, removes) what a running service's actors read.
    runtime = RayRuntime(settings.ray_address, mongodb_uri or "mongodb://unused")
    where = f"cluster at {settings.ray_address}" if settings.ray_address else "local, started and stopped"
    try:
        runtime.start()  # on the main thread, as a local Ray requires
        answered = await runtime.ping()
    except Exception as exc:  # any failure is the check's answer
        return Check("ray", FAILED, f"{where}: {type(exc).__name__}")
    finally:
        runtime.stop()
    return Check("ray", OK if answered else FAILED, where if answered else f"{where}: did not answer")


def _models_request(name: str, provider: ProviderSettings) -> tuple[str, dict[str, str]]:
    """The provider's list-models URL and authentication headers (its own wire format)."""
    base = (provider.base_url or "").rstrip("/")
    key = provider.api_key or ""
    if name == "providerA":  # Anthropic Messages API
        return f"{base}/v1/models", {"x-api-key": key, "anthropic-version": ANTHROPIC_VERSION}
    if name == "providerB":  # OpenAI-compatible: the base URL includes /v1
        return f"{base}/models", {"Authorization": f"Bearer {key}"}
    return f"{base}/v1beta/models", {"x-goog-api-key": key}  # Gemini API


async def check_provider(name: str, provider: ProviderSettings) -> Check:
    """The provider's authenticated list-models call (no tokens spent)."""
    variable = f"SVC_PROVIDER{name[-1]}"
    if not provider.api_key:
        return Check(name, NOT_CONFIGURED, f"{variable}_API_KEY is not set")
    if not provider.base_url:
        return Check(name, FAILED, f"{variable}_BASE_URL is not set")
    url, headers = _models_request(name, provider)
    try:
        async with httpx.AsyncClient(timeout=TIMEOUT_S) as client:
            response = await client.get(url, headers=headers)
    except httpx.HTTPError as exc:
        return Check(name, FAILED, f"{_where(url)} unreachable ({type(exc).__name__})")
    if response.status_code in (401, 403):
        return Check(name, FAILED, f"{_where(url)} refused the key (HTTP {response.status_code})")
    if not response.is_success:
        return Check(name, FAILED, f"{_where(url)} answered HTTP {response.status_code}")
    return Check(name, OK, f"{_where(url)} accepted the key")


def _smtp_round_trip(url: str) -> str:
    """Connect, say EHLO, STARTTLS when offered (smtp://), log in when the URL has a user, NOOP, QUIT."""
    parts = urlsplit(url)
    implicit_tls = parts.scheme == "smtps"
    host = parts.hostname or "localhost"
    port = parts.port or (465 if implicit_tls else 25)
    context = ssl.create_default_context()
    client: smtplib.SMTP = (
        smtplib.SMTP_SSL(host, port, timeout=TIMEOUT_S, context=context)
        if implicit_tls
        else smtplib.SMTP(host, port, timeout=TIMEOUT_S)
    )
    with client:
        client.ehlo()
        tls = implicit_tls
        if not implicit_tls and client.has_extn("starttls"):
            client.starttls(context=context)
            client.ehlo()
            tls = True
        if parts.username:
            client.login(unquote(parts.username), unquote(parts.password or ""))
        code, _ = client.noop()
        if code != 250:
            raise smtplib.SMTPResponseException(code, b"NOOP refused")
    return f"{host}:{port} answered{' over TLS' if tls else ''}{', login accepted' if parts.username else ''}"


async def check_smtp(settings: Settings) -> Check:
    """A full SMTP round trip without sending anything."""
    if not settings.smtp_url:
        return Check("smtp", NOT_CONFIGURED, "SVC_SMTP_URL is not set: mail stays in the outbox collection")
    try:
        detail = await asyncio.wait_for(asyncio.to_thread(_smtp_round_trip, settings.smtp_url), TIMEOUT_S * 2)
    except smtplib.SMTPAuthenticationError as exc:
        return Check("smtp", FAILED, f"{_where(settings.smtp_url)} refused the login ({exc.smtp_code})")
    except (OSError, smtplib.SMTPException, TimeoutError) as exc:
        return Check("smtp", FAILED, f"{_where(settings.smtp_url)}: {type(exc).__name__}")
    return Check("smtp", OK, detail)


async def check_payments(settings: Settings) -> Check:
    """An authenticated read of the provider's balance (changes nothing)."""
    if not settings.stripe_api_key:
        return Check("payments", NOT_CONFIGURED, "SVC_STRIPE_API_KEY is not set: billing answers 503")
    base = settings.stripe_api_base or "https://api.stripe.com"
    client = stripe.StripeClient(
        settings.stripe_api_key,
        base_addresses={"api": base},
        http_client=stripe.HTTPXClient(timeout=TIMEOUT_S),
        max_network_retries=0,
    )
    try:
        await client.v1.balance.retrieve_async()
    except stripe.AuthenticationError:
        return Check("payments", FAILED, f"{_where(base)} refused the key")
    except stripe.StripeError as exc:
        return Check("payments", FAILED, f"{_where(base)}: {type(exc).__name__}")
    if not settings.stripe_webhook_secret:
        return Check("payments", FAILED, f"{_where(base)} accepted the key; SVC_STRIPE_WEBHOOK_SECRET unset")
    return Check("payments", OK, f"{_where(base)} accepted the key")


def render(checks: list[Check]) -> str:
    """The checks as an aligned text table."""
    rows = [("CHECK", "STATUS", "DETAIL"), *((c.name, c.status, c.detail) for c in checks)]
    widths = [max(len(row[i]) for row in rows) for i in range(2)]
    return "\n".join(f"{a:<{widths[0]}}  {b:<{widths[1]}}  {c}".rstrip() for a, b, c in rows)


async def doctor(settings: Settings, out: TextIO = sys.stdout) -> int:
    """Run every check, print the table; 1 when a check failed, else 0."""
    database, uri = await check_database(settings)
    checks = [database, await check_ray(settings, uri)]
    others: list[Awaitable[Check]] = [
        *(check_provider(name, provider) for name, provider in sorted(settings.providers.items())),
        check_smtp(settings),
        check_payments(settings),
    ]
    checks += await asyncio.gather(*others)
    checks += [Check(*row) for row in await check_mcp(settings)]  # the MCP catalogue (docs/mcp.md)
    print(render(checks), file=out, flush=True)
    return 1 if any(check.status == FAILED for check in checks) else 0
