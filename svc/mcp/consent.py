"""The deployer's consent to an install's MCP tools, each pinned by the hash of its definition.

One document per (install, server, tool) in `mcp_consents`: the definition's digest (sha256 of
name, description and input schema: svc/mcp/client.py `tool_digest`), `accepted` or `refused`,
who decided and when. At run time a tool is offered only when its definition as listed now has
the digest the deployer accepted; a tool whose definition changed, or that the server lists and
nobody decided on, is quarantined: not offered, logged, and shown here to accept or refuse
(tool-definition changes are how MCP servers are poisoned). A refused tool is never offered.

Accepting binds to what was shown: the decision names the digest the deployer saw, and it is
refused (409) when the server now lists a different definition.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Any, Literal

from svc.core import Document, Store, utcnow

COLLECTION = "mcp_consents"
MAX_PINS = 20 * 128  # servers per team x tools per server
Status = Literal["accepted", "refused"]


@dataclass(frozen=True)
class Pin:
    """The deployer's decision on one tool."""

    digest: str
    status: Status


def pin_id(install_id: str, server: str, tool: str) -> str:
    """One document per tool (tool names may hold `.` and `$`, so they are not field names)."""
    return f"{install_id}|{server}|{hashlib.sha256(tool.encode()).hexdigest()[:24]}"


def classify(pin: Pin | None, digest: str) -> str:
    """`accepted` (offered), `refused`, `new` (never decided) or `changed` (quarantined)."""
    if pin is None:
        return "new"
    if pin.status == "refused":
        return "refused"
    return "accepted" if pin.digest == digest else "changed"


class Consent:
    """Reads and records the deployer's decisions."""

    def __init__(self, store: Store) -> None:
        self.store = store

    async def pins(self, install_id: str) -> dict[tuple[str, str], Pin]:
        """Every decision of the install, by (server, tool)."""
        docs = await self.store[COLLECTION].find({"installId": install_id}).to_list(MAX_PINS)
        return {(d["server"], d["tool"]): Pin(d["digest"], d["status"]) for d in docs}

    async def decide(
        self, install_id: str, server: str, tool: str, digest: str, status: Status, by: str | None
    ) -> None:
        """Record one decision (the latest decision on a tool replaces the one before)."""
        doc: Document = {
            "installId": install_id,
            "server": server,
            "tool": tool,
            "digest": digest,
            "status": status,
            "decidedBy": by,
            "decidedAt": utcnow(),
        }
        await self.store[COLLECTION].replace_one({"_id": pin_id(install_id, server, tool)}, doc, upsert=True)

    async def forget(self, install_id: str) -> None:
        """Drop an install's decisions (the install is gone)."""
        await self.store[COLLECTION].delete_many({"installId": install_id})


def suggested_rule(annotations: dict[str, Any] | None) -> str | None:
    """What a tool's hints suggest for its rule: shown to the deployer, never applied. A hint is
    the server's own claim, so it may inform a default but never grants access."""
    if not annotations:
        return None
    if annotations.get("destructiveHint") is True and annotations.get("readOnlyHint") is not True:
        return "require_approval"
    if annotations.get("readOnlyHint") is True:
        return "allow"
    return None
