"""orchB (Relevance AI): the wire shared by the driver (plugins/builtin/orch_b.py) and its
upgrades (plugins/builtin/orch_b_upgrade.py): the API root, one request with its errors, the
upsert body and the calls that make and delete an agent. Every request goes through the egress
guard's client the caller passes in; credentials never appear in errors. A plain module of
helpers; not registered as a plugin.
"""

from __future__ import annotations

import json
import os
import re
from typing import Any

import httpx

from config.catalogue import UPSTREAM
from plugins.egress import EgressDenied
from plugins.types import PlatformError, PlatformInputError

BASE_URL_ENV = "SVC_ORCHB_BASE_URL"
DEFAULT_BASE_URL = "https://api-{region}.stack.tryrelevance.com/latest"
REGION_RE = re.compile(r"^[a-z0-9-]{1,32}$")
SNIPPET_CHARS = 200


def base_url(credentials: dict[str, str]) -> str:
    """The API root: SVC_ORCHB_BASE_URL when set (read at call time), else the region's host."""
    override = os.environ.get(BASE_URL_ENV, "").strip()
    if override:
        return override.rstrip("/")
    region = credentials.get("region", "")
    if not isinstance(region, str) or not REGION_RE.fullmatch(region):
        raise PlatformInputError("credentials.region: orchB region is invalid")
    return DEFAULT_BASE_URL.format(region=region)


def _headers(credentials: dict[str, str]) -> dict[str, str]:
    """The request headers; Relevance AI takes `Authorization: <project>:<api key>`."""
    return {
        "Authorization": f"{credentials.get('projectId', '')}:{credentials.get('apiKey', '')}",
        "Accept": "application/json",
    }


def redact(text: str, credentials: dict[str, str]) -> str:
    """The text with the API key (and so the Authorization value) blanked out."""
    secret = credentials.get("apiKey")
    if isinstance(secret, str) and secret:
        text = text.replace(secret, "***")
    return text


def _snippet(response: httpx.Response, credentials: dict[str, str]) -> str:
    """The first characters of an error body, single-line and free of credentials."""
    try:
        body = response.text
    except (UnicodeDecodeError, httpx.HTTPError):
        body = ""
    return redact(" ".join(body.split()), credentials)[:SNIPPET_CHARS]


async def call(
    client: httpx.AsyncClient,
    method: str,
    url: str,
    what: str,
    credentials: dict[str, str],
    **kwargs: Any,
) -> httpx.Response:
    """One upstream request; PlatformError on a transport failure or a non-2xx answer."""
    try:
        response = await client.request(method, url, headers=_headers(credentials), **kwargs)
    except httpx.TimeoutException:
        raise PlatformError(f"orchB {what} timed out") from None
    except EgressDenied:
        # Without an operator override the host is made from the caller's region: their input.
        if os.environ.get(BASE_URL_ENV, "").strip():
            raise PlatformError(f"orchB {what} failed: the configured base URL is not allowed") from None
        raise PlatformInputError(
            "credentials.region: the orchB host for this region cannot be reached"
        ) from None
    except httpx.HTTPError as exc:
        raise PlatformError(f"orchB {what} failed: {type(exc).__name__}") from None
    if not response.is_success:
        status = response.status_code
        raise PlatformError(
            f"orchB {what} failed with HTTP {status}: {_snippet(response, credentials)}",
            status,
            denied=status in (401, 403),
        )
    return response


def json_body(response: httpx.Response, what: str) -> Any:
    """The response body as JSON; PlatformError when it is not JSON."""
    try:
        return response.json()
    except (json.JSONDecodeError, UnicodeDecodeError):
        raise PlatformError(f"orchB {what} returned a body that is not JSON", response.status_code) from None


def model_for(agent: dict[str, Any], options: dict[str, Any]) -> str | None:
    """The upstream model name for an agent (the install's model overrides), or None if unknown."""
    return UPSTREAM.get(options.get("model") or agent.get("model") or "")


def upsert_body(agent: dict[str, Any], model: str, install_id: str, ingest_url: str) -> dict[str, Any]:
    """One team agent as an upsert body (provisioning, and upgrades with its `agent_id`)."""
    return {
        "name": agent["name"],
        "system_prompt": agent.get("prompt") or "",
        "model": model,
        "metadata": {"svcInstallId": install_id, "svcAgentKey": agent["key"], "svcIngestUrl": ingest_url},
    }


async def delete_agent(
    client: httpx.AsyncClient, base: str, agent_id: str, credentials: dict[str, str]
) -> None:
    """Delete one upstream agent; PlatformError when that fails."""
    await call(client, "POST", f"{base}/agents/{agent_id}/delete", "agents/delete", credentials, json={})


async def upsert_agent(
    client: httpx.AsyncClient, base: str, body: dict[str, Any], credentials: dict[str, str]
) -> str:
    """Create an agent (or, with `agent_id` in the body, update that one); the agent's id."""
    response = await call(client, "POST", f"{base}/agents/upsert", "agents/upsert", credentials, json=body)
    answer = json_body(response, "agents/upsert")
    agent_id = answer.get("agent_id") if isinstance(answer, dict) else None
    if not isinstance(agent_id, str) or not agent_id:
        raise PlatformError("orchB agents/upsert returned no agent_id", response.status_code)
    return agent_id
