"""Human approvals of MCP tool calls, bound to the exact call, single use (docs/mcp.md).

A call under a `require_approval` rule is identified by the digest of everything that makes it
that call: the install, the run, the agent, the server, the tool, the arguments (in full, as the
server would receive them) and the version of the agent's access policy. `request` records an
approval request for that digest (one open request per digest: a unique index on `openDigest`,
set while the request is pending or approved); a person approves or rejects it by its id
(`decide`); the toolbox lets the call through only by `consume`, one conditional write that
turns an unexpired approval of exactly that digest into `used`. So:

- a replayed approval is refused: it was used, and the write that uses it matches nothing;
- an altered call is refused: other arguments (or run, agent, tool, policy) are another digest;
- an expired approval is refused: an approval must be used within GRANT_TTL of its decision, and
  a request no one decides on lapses after REQUEST_TTL.

Approvals live in `mcp_approvals` (kept 30 days); the run's journal holds the call itself.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from datetime import timedelta
from typing import Any, Literal

from pymongo.errors import DuplicateKeyError

from svc.core import Conflict, Document, NotFound, Store, iso, new_id, utcnow

COLLECTION = "mcp_approvals"
REQUEST_TTL = timedelta(days=7)
GRANT_TTL = timedelta(hours=1)
LIST_LIMIT = 100
Decision = Literal["approve", "reject"]


@dataclass(frozen=True)
class CallIdentity:
    """What an approval is bound to."""

    install_id: str
    run_id: str
    agent: str
    server: str
    tool: str
    arguments: dict[str, Any]
    policy_version: str

    @property
    def digest(self) -> str:
        """sha256 over the canonical JSON of every part."""
        canonical = json.dumps(
            {
                "install": self.install_id,
                "run": self.run_id,
                "agent": self.agent,
                "server": self.server,
                "tool": self.tool,
                "arguments": self.arguments,
                "policyVersion": self.policy_version,
            },
            sort_keys=True,
            separators=(",", ":"),
            ensure_ascii=False,
            default=str,
        )
        return hashlib.sha256(canonical.encode()).hexdigest()


def view(doc: Document) -> dict[str, Any]:
    """An approval as the console shows it."""
    return {
        "id": doc["_id"],
        "status": doc["status"],
        "runId": doc["runId"],
        "agentKey": doc["agentKey"],
        "server": doc["server"],
        "tool": doc["tool"],
        "arguments": doc.get("arguments"),
        "description": doc.get("description"),
        "digest": doc["digest"],
        "policyVersion": doc.get("policyVersion"),
        "requestedAt": iso(doc.get("requestedAt")),
        "expiresAt": iso(doc.get("expiresAt")),
        "decidedAt": iso(doc.get("decidedAt")),
        "decidedBy": doc.get("decidedBy"),
        "grantExpiresAt": iso(doc.get("grantExpiresAt")),
        "usedAt": iso(doc.get("usedAt")),
    }


class Approvals:
    """Requests, decisions and the single use of approvals."""

    def __init__(self, store: Store) -> None:
        self.store = store

    async def request(self, call: CallIdentity, masked_arguments: Any, description: str) -> Document:
        """The open request for this exact call, made now if there is none."""
        digest = call.digest
        now = utcnow()
        doc: Document = {
            "_id": new_id(),
            "openDigest": digest,
            "digest": digest,
            "status": "pending",
            "installId": call.install_id,
            "runId": call.run_id,
            "agentKey": call.agent,
            "server": call.server,
            "tool": call.tool,
            "arguments": masked_arguments,
            "description": description,
            "policyVersion": call.policy_version,
            "requestedAt": now,
            "expiresAt": now + REQUEST_TTL,
        }
        try:
            await self.store[COLLECTION].insert_one(doc)
            return doc
        except DuplicateKeyError:
            found = await self.store[COLLECTION].find_one({"openDigest": digest})
            if found is None:  # used or rejected between the two writes: ask again
                return await self.request(call, masked_arguments, description)
            return found

    async def decide(self, install_id: str, approval_id: str, decision: Decision, by: str | None) -> Document:
        """Approve or reject a pending, unexpired request of this install; 404 or 409 otherwise."""
        now = utcnow()
        fields: Document = {"decidedAt": now, "decidedBy": by}
        if decision == "approve":
            update: Document = {"$set": {**fields, "status": "approved", "grantExpiresAt": now + GRANT_TTL}}
        else:
            update = {"$set": {**fields, "status": "rejected"}}
        claimed = await self.store[COLLECTION].update_one(
            {"_id": approval_id, "installId": install_id, "status": "pending", "expiresAt": {"$gt": now}},
            update,
        )
        doc = await self.store[COLLECTION].find_one({"_id": approval_id, "installId": install_id})
        if doc is None:
            raise NotFound("Approval not found")
        if claimed.modified_count != 1:
            state = "expired" if doc["status"] == "pending" else doc["status"]
            raise Conflict(f"The approval is no longer pending (status: {state})")
        return doc

    async def decide_once(
        self, install_id: str, approval_id: str, decision: Decision, by: str | None
    ) -> None:
        """`decide`, for a run that applies a person's decision on resuming (a second resume after
        a crash finds it decided already: nothing to do)."""
        try:
            await self.decide(install_id, approval_id, decision, by)
        except (Conflict, NotFound):
            pass

    async def consume(self, call: CallIdentity) -> Literal["approved", "rejected"] | None:
        """Use this exact call's approval once: `approved` (the call may go, once), `rejected`
        (a person refused it), or None (no usable approval: none, used, expired or another call)."""
        digest = call.digest
        now = utcnow()
        used = await self.store[COLLECTION].update_one(
            {"openDigest": digest, "status": "approved", "grantExpiresAt": {"$gt": now}},
            {"$set": {"status": "used", "usedAt": now}, "$unset": {"openDigest": ""}},
        )
        if used.modified_count == 1:
            return "approved"
        rejected = await self.store[COLLECTION].update_one(
            {"openDigest": digest, "status": "rejected"}, {"$unset": {"openDigest": ""}}
        )
        if rejected.modified_count == 1:
            return "rejected"
        # An approval that lapsed before it was used is closed, so the next call asks again.
        await self.store[COLLECTION].update_one(
            {"openDigest": digest, "status": "approved", "grantExpiresAt": {"$lte": now}},
            {"$set": {"status": "expired"}, "$unset": {"openDigest": ""}},
        )
        return None

    async def of_install(self, install_id: str, status: str | None = None) -> list[dict[str, Any]]:
        """The install's newest approvals (at most LIST_LIMIT), optionally of one status."""
        query: Document = {"installId": install_id}
        if status is not None:
            query["status"] = status
        docs = (
            await self.store[COLLECTION]
            .find(query)
            .sort([("requestedAt", -1), ("_id", -1)])
            .to_list(LIST_LIMIT)
        )
        return [view(doc) for doc in docs]
