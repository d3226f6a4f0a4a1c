"""The egress guard for the MCP SDK's HTTP client (httpx2, the client the `mcp` SDK 2.x speaks).

The streamable HTTP transport of an MCP client is outbound HTTP like `http_request`, so every
request it sends (the JSON-RPC POSTs, the GET of the server's event stream, the DELETE that ends
a session, and each redirect the SDK follows within the origin) passes through
`GuardedTransport`: first the caller's `check` (the agent's access policy), then the same
address vetting as plugins/egress.py (refuse internal addresses unless allowed, connect to the
vetted address, never resolving the name again). The SDK takes the client through its
`http_client` hook (`streamable_http_client(url, http_client=...)`).

Imported only when an agent uses a remote MCP server: httpx2 and the SDK are not loaded by an
install whose team uses no MCP.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import httpx2

from plugins.egress import EgressDenied, tls_context, vet

# (method, URL) -> None, or EgressDenied when the agent's policy refuses the request.
Check = Callable[[str, str], Awaitable[None]]
# The JSON-RPC error code of a refused request (svc/mcp/client.py reads it back).
REFUSED_CODE = -32077
# Connect, write and pool bounds; reads wait for the tool (each call has its own bound).
TIMEOUT = httpx2.Timeout(30.0, connect=10.0, read=300.0)
__all__ = ["REFUSED_CODE", "Check", "EgressDenied", "GuardedTransport", "guarded_mcp_client"]


class GuardedTransport(httpx2.AsyncBaseTransport):
    """An httpx2 transport that asks `check`, vets the destination and connects to the vetted IP."""

    def __init__(self, allow_private: bool, check: Check | None = None) -> None:
        self.allow_private = allow_private
        self.check = check
        self._inner = httpx2.AsyncHTTPTransport(verify=tls_context(), trust_env=False)

    async def handle_async_request(self, request: httpx2.Request) -> httpx2.Response:
        """Check, vet, pin the address, forward; a refusal is answered here as a JSON-RPC error,
        which the SDK hands to the one request it concerns (an exception would end the session)."""
        host = request.url.host
        try:
            if self.check is not None:
                await self.check(request.method, str(request.url))
            address = await vet(request.url, self.allow_private)  # type: ignore[arg-type]
        except EgressDenied as exc:
            error = {"code": REFUSED_CODE, "message": f"Blocked: {exc.reason}"}
            body = {"jsonrpc": "2.0", "id": None, "error": error}
            return httpx2.Response(403, json=body, request=request)
        request.url = request.url.copy_with(host=str(address))
        if request.url.scheme == "https":
            request.extensions = {**request.extensions, "sni_hostname": host}
        return await self._inner.handle_async_request(request)

    async def aclose(self) -> None:
        """Close the pooled connections."""
        await self._inner.aclose()


def guarded_mcp_client(
    allow_private: bool, headers: dict[str, str] | None = None, check: Check | None = None, **options: Any
) -> httpx2.AsyncClient:
    """An httpx2 client for the MCP SDK whose every request passes the check and the guard."""
    options.setdefault("timeout", TIMEOUT)
    return httpx2.AsyncClient(
        transport=GuardedTransport(allow_private, check), headers=headers, follow_redirects=False, **options
    )
