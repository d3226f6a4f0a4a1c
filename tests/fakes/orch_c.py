"""A fake Amazon Bedrock Agents API (the `orchC` upstream) for driver tests, over real HTTP.

`create_app(FakeBedrockAgents())` serves the REST paths botocore uses (from the
`bedrock-agent` 2023-06-05 and `bedrock-agent-runtime` 2023-07-26 service models):

- `PUT /agents/` CreateAgent -> {agent} (status CREATING; NOT_PREPARED when read back)
- `GET /agents/{agentId}/` GetAgent -> {agent}
- `POST /agents/{agentId}/` PrepareAgent -> {agentId, agentStatus, agentVersion, preparedAt}
- `DELETE /agents/{agentId}/?skipResourceInUseCheck=` DeleteAgent (drops its aliases too)
- `PUT /agents/{agentId}/agentaliases/` CreateAgentAlias -> {agentAlias} (the agent must be PREPARED)
- `GET /agents/{agentId}/agentaliases/{agentAliasId}/` GetAgentAlias -> {agentAlias}
- `DELETE /agents/{agentId}/agentaliases/{agentAliasId}/` DeleteAgentAlias
- `PUT /agents/{agentId}/agentversions/DRAFT/agentcollaborators/` AssociateAgentCollaborator
- `POST /agents/{agentId}/agentAliases/{agentAliasId}/sessions/{sessionId}/text` InvokeAgent,
  answered as an `application/vnd.amazon.eventstream` of trace and chunk events

Errors are rest-json: the status, header `x-amzn-ErrorType` and body {"message"}. A request
whose SigV4 `Authorization` does not name the expected access key is 403
UnrecognizedClientException. `fail_create_agent_at=N` answers every attempt of the Nth
distinct CreateAgent (by clientToken, so botocore's retries fail too) with 500;
`deny_deletes` answers deletes with AccessDeniedException; `conflict_deletes` holds agent
ids whose deletes answer 409.
"""

from __future__ import annotations

import base64
import binascii
import json
import re
import secrets
import string
import struct
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from aiohttp import web

NAME_RE = re.compile(r"^([0-9a-zA-Z][_-]?){1,100}$")
ROLE_RE = re.compile(r"^arn:aws(-[^:]+)?:iam::([0-9]{12})?:role/.+$")
ALIAS_ARN_RE = re.compile(r"^arn:aws:bedrock:[a-z0-9-]{1,20}:[0-9]{12}:agent-alias/(\w{10})/(\w{10})$")
CREDENTIAL_RE = re.compile(r"Credential=([^/]+)/\d{8}/([^/]+)/bedrock/aws4_request")


@dataclass
class Recorded:
    """One request as the fake received it."""

    operation: str
    method: str
    path: str
    query: dict[str, str]
    body: Any


@dataclass
class FakeBedrockAgents:
    """The fake's state: agents, aliases, collaborators, recorded requests and failure switches."""

    access_key_id: str = "AKIAFAKEORCHC0000001"
    secret_access_key: str = "fakeSecret/orchC+Key0123456789abcdefGHIJ"
    region: str = "eu-west-1"
    role_arn: str = "arn:aws:iam::123456789012:role/svc-bedrock-agents"
    account: str = "123456789012"
    fail_create_agent_at: int | None = None
    deny_deletes: bool = False
    conflict_deletes: set[str] = field(default_factory=set)
    usage: tuple[int, int] = (21, 8)
    agents: dict[str, dict[str, Any]] = field(default_factory=dict)
    aliases: dict[str, dict[str, dict[str, Any]]] = field(default_factory=dict)
    collaborators: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    requests: list[Recorded] = field(default_factory=list)
    create_tokens: list[str] = field(default_factory=list)

    def credentials(self) -> dict[str, str]:
        """The orchC credentials an install would carry for this fake account."""
        return {
            "accessKeyId": self.access_key_id,
            "secretAccessKey": self.secret_access_key,
            "region": self.region,
            "agentResourceRoleArn": self.role_arn,
        }

    def writes(self) -> list[Recorded]:
        """Every request except the Get* status reads, in the order received."""
        return [r for r in self.requests if not r.operation.startswith("Get")]

    def alias_count(self) -> int:
        """How many aliases exist across every agent."""
        return sum(len(a) for a in self.aliases.values())


def _now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _id() -> str:
    return "".join(secrets.choice(string.ascii_uppercase + string.digits) for _ in range(10))


def _error(status: int, code: str, message: str) -> web.Response:
    """A rest-json error as Bedrock sends it."""
    return web.json_response({"message": message}, status=status, headers={"x-amzn-ErrorType": code})


def _header(name: str, value: str) -> bytes:
    """One event-stream header of type string (7)."""
    raw_name, raw_value = name.encode(), value.encode()
    return struct.pack("!B", len(raw_name)) + raw_name + struct.pack("!BH", 7, len(raw_value)) + raw_value


def encode_event(event_type: str, payload: dict[str, Any]) -> bytes:
    """One `application/vnd.amazon.eventstream` message: prelude, CRC, headers, JSON payload, CRC."""
    pairs = ((":event-type", event_type), (":content-type", "application/json"), (":message-type", "event"))
    headers = b"".join(_header(k, v) for k, v in pairs)
    body = json.dumps(payload).encode()
    prelude = struct.pack("!II", 12 + len(headers) + len(body) + 4, len(headers))
    prelude += struct.pack("!I", binascii.crc32(prelude) & 0xFFFFFFFF)
    message = prelude + headers + body
    return message + struct.pack("!I", binascii.crc32(message) & 0xFFFFFFFF)


def create_app(fake: FakeBedrockAgents) -> web.Application:
    """The aiohttp application serving the fake."""

    def alias_arn(agent_id: str, alias_id: str) -> str:
        return f"arn:aws:bedrock:{fake.region}:{fake.account}:agent-alias/{agent_id}/{alias_id}"

    def collaborator_of(agent_id: str) -> bool:
        return any(
            c["agentDescriptor"]["aliasArn"].split("/")[1] == agent_id
            for links in fake.collaborators.values()
            for c in links
        )

    @web.middleware
    async def record(request: web.Request, handler: Any) -> web.StreamResponse:
        body: Any = None
        raw = await request.read()
        if raw:
            body = json.loads(raw)
        operation = getattr(request.match_info.handler, "operation", request.path)
        fake.requests.append(Recorded(operation, request.method, request.path, dict(request.query), body))
        match = CREDENTIAL_RE.search(request.headers.get("Authorization", ""))
        if not match or match.group(1) != fake.access_key_id:
            return _error(
                403, "UnrecognizedClientException", "The security token included in the request is invalid."
            )
        return await handler(request)

    def op(name: str) -> Any:
        def mark(func: Any) -> Any:
            func.operation = name
            return func

        return mark

    def agent_or_404(request: web.Request) -> dict[str, Any] | web.Response:
        agent = fake.agents.get(request.match_info["agentId"])
        if agent is None:
            return _error(404, "ResourceNotFoundException", f"No agent {request.match_info['agentId']}")
        return agent

    def denied(request: web.Request, action: str) -> web.Response | None:
        if fake.deny_deletes:
            return _error(
                403,
                "AccessDeniedException",
                f"User: arn:aws:iam::{fake.account}:user/deployer is not authorized to perform: "
                f"bedrock:{action} on resource: arn:aws:bedrock:{fake.region}:{fake.account}:agent/"
                f"{request.match_info['agentId']}",
            )
        if request.match_info["agentId"] in fake.conflict_deletes:
            return _error(409, "ConflictException", "The agent is busy; try again later")
        return None

    @op("CreateAgent")
    async def create_agent(request: web.Request) -> web.Response:
        body = await request.json()
        token = body.get("clientToken") or _id()
        for agent in fake.agents.values():  # idempotent retry
            if agent["clientToken"] == token:
                return web.json_response({"agent": _public(agent) | {"agentStatus": "CREATING"}}, status=202)
        if token not in fake.create_tokens:
            fake.create_tokens.append(token)
        if fake.fail_create_agent_at == fake.create_tokens.index(token) + 1:
            return _error(500, "InternalServerException", "Internal server error")
        name = body.get("agentName", "")
        problems = []
        if not NAME_RE.match(name):
            problems.append("agentName")
        if not 40 <= len(body.get("instruction") or "") <= 4000:
            problems.append("instruction")
        if not body.get("foundationModel"):
            problems.append("foundationModel")
        if not ROLE_RE.match(body.get("agentResourceRoleArn") or ""):
            problems.append("agentResourceRoleArn")
        if problems:
            return _error(400, "ValidationException", f"Invalid fields: {', '.join(problems)}")
        if any(a["agentName"] == name for a in fake.agents.values()):
            return _error(409, "ConflictException", f"An agent named {name} already exists")
        agent_id, now = _id(), _now()
        agent = {
            "agentId": agent_id,
            "agentName": name,
            "agentArn": f"arn:aws:bedrock:{fake.region}:{fake.account}:agent/{agent_id}",
            "agentVersion": "DRAFT",
            "clientToken": token,
            "instruction": body["instruction"],
            "agentStatus": "NOT_PREPARED",
            "foundationModel": body["foundationModel"],
            "idleSessionTTLInSeconds": body.get("idleSessionTTLInSeconds", 600),
            "agentResourceRoleArn": body["agentResourceRoleArn"],
            "agentCollaboration": body.get("agentCollaboration", "DISABLED"),
            "createdAt": now,
            "updatedAt": now,
            "versions": 0,
        }
        if body.get("description"):
            agent["description"] = body["description"]
        fake.agents[agent_id] = agent
        fake.aliases[agent_id] = {}
        return web.json_response({"agent": _public(agent) | {"agentStatus": "CREATING"}}, status=202)

    @op("GetAgent")
    async def get_agent(request: web.Request) -> web.Response:
        agent = agent_or_404(request)
        if isinstance(agent, web.Response):
            return agent
        return web.json_response({"agent": _public(agent)})

    @op("PrepareAgent")
    async def prepare_agent(request: web.Request) -> web.Response:
        agent = agent_or_404(request)
        if isinstance(agent, web.Response):
            return agent
        if agent["agentCollaboration"] != "DISABLED" and not fake.collaborators.get(agent["agentId"]):
            return _error(400, "ValidationException", "A supervisor agent needs at least one collaborator")
        agent["agentStatus"] = "PREPARED"
        agent["preparedAt"] = agent["updatedAt"] = _now()
        return web.json_response(
            {
                "agentId": agent["agentId"],
                "agentStatus": "PREPARING",
                "agentVersion": "DRAFT",
                "preparedAt": agent["preparedAt"],
            },
            status=202,
        )

    @op("DeleteAgent")
    async def delete_agent(request: web.Request) -> web.Response:
        refused = denied(request, "DeleteAgent")
        if refused is not None:
            return refused
        agent = agent_or_404(request)
        if isinstance(agent, web.Response):
            return agent
        skip = request.query.get("skipResourceInUseCheck") == "true"
        if not skip and collaborator_of(agent["agentId"]):
            return _error(409, "ConflictException", "The agent is in use by a supervisor")
        del fake.agents[agent["agentId"]]
        fake.aliases.pop(agent["agentId"], None)
        fake.collaborators.pop(agent["agentId"], None)
        return web.json_response({"agentId": agent["agentId"], "agentStatus": "DELETING"}, status=202)

    @op("CreateAgentAlias")
    async def create_agent_alias(request: web.Request) -> web.Response:
        agent = agent_or_404(request)
        if isinstance(agent, web.Response):
            return agent
        body = await request.json()
        if agent["agentStatus"] != "PREPARED":
            return _error(409, "ConflictException", "Prepare the agent before creating an alias")
        if not NAME_RE.match(body.get("agentAliasName", "")):
            return _error(400, "ValidationException", "Invalid agentAliasName")
        aliases = fake.aliases[agent["agentId"]]
        if any(a["agentAliasName"] == body["agentAliasName"] for a in aliases.values()):
            return _error(409, "ConflictException", "An alias with that name exists")
        agent["versions"] += 1
        alias_id, now = _id(), _now()
        alias = {
            "agentId": agent["agentId"],
            "agentAliasId": alias_id,
            "agentAliasName": body["agentAliasName"],
            "agentAliasArn": alias_arn(agent["agentId"], alias_id),
            "routingConfiguration": [{"agentVersion": str(agent["versions"])}],
            "createdAt": now,
            "updatedAt": now,
            "agentAliasStatus": "PREPARED",
        }
        aliases[alias_id] = alias
        return web.json_response({"agentAlias": alias | {"agentAliasStatus": "CREATING"}}, status=202)

    @op("GetAgentAlias")
    async def get_agent_alias(request: web.Request) -> web.Response:
        alias = fake.aliases.get(request.match_info["agentId"], {}).get(request.match_info["agentAliasId"])
        if alias is None:
            return _error(404, "ResourceNotFoundException", "Alias not found")
        return web.json_response({"agentAlias": alias})

    @op("DeleteAgentAlias")
    async def delete_agent_alias(request: web.Request) -> web.Response:
        refused = denied(request, "DeleteAgentAlias")
        if refused is not None:
            return refused
        agent_id, alias_id = request.match_info["agentId"], request.match_info["agentAliasId"]
        if fake.aliases.get(agent_id, {}).pop(alias_id, None) is None:
            return _error(404, "ResourceNotFoundException", "Alias not found")
        return web.json_response(
            {"agentId": agent_id, "agentAliasId": alias_id, "agentAliasStatus": "DELETING"}, status=202
        )

    @op("AssociateAgentCollaborator")
    async def associate(request: web.Request) -> web.Response:
        agent = agent_or_404(request)
        if isinstance(agent, web.Response):
            return agent
        body = await request.json()
        if request.match_info["agentVersion"] != "DRAFT":
            return _error(400, "ValidationException", "Collaborators are added to the DRAFT version")
        if agent["agentCollaboration"] == "DISABLED":
            return _error(400, "ValidationException", "The agent is not a supervisor")
        match = ALIAS_ARN_RE.match((body.get("agentDescriptor") or {}).get("aliasArn", ""))
        alias = match and fake.aliases.get(match.group(1), {}).get(match.group(2))
        if not alias or alias["agentAliasStatus"] != "PREPARED":
            return _error(400, "ValidationException", "The collaborator alias is missing or not prepared")
        links = fake.collaborators.setdefault(agent["agentId"], [])
        if not NAME_RE.match(body.get("collaboratorName", "")) or any(
            c["collaboratorName"] == body["collaboratorName"] for c in links
        ):
            return _error(400, "ValidationException", "Invalid or duplicate collaboratorName")
        if not 1 <= len(body.get("collaborationInstruction") or "") <= 4000:
            return _error(400, "ValidationException", "Invalid collaborationInstruction")
        now = _now()
        link = {
            "agentId": agent["agentId"],
            "agentVersion": "DRAFT",
            "agentDescriptor": {"aliasArn": body["agentDescriptor"]["aliasArn"]},
            "collaboratorId": _id(),
            "collaborationInstruction": body["collaborationInstruction"],
            "collaboratorName": body["collaboratorName"],
            "relayConversationHistory": body.get("relayConversationHistory", "DISABLED"),
            "createdAt": now,
            "lastUpdatedAt": now,
        }
        links.append(link)
        agent["agentStatus"] = "NOT_PREPARED"
        return web.json_response({"agentCollaborator": link})

    @op("InvokeAgent")
    async def invoke_agent(request: web.Request) -> web.StreamResponse:
        agent = agent_or_404(request)
        if isinstance(agent, web.Response):
            return agent
        alias = fake.aliases[agent["agentId"]].get(request.match_info["agentAliasId"])
        if alias is None:
            return _error(404, "ResourceNotFoundException", "Alias not found")
        body = await request.json()
        session_id = request.match_info["sessionId"]
        reply = f"{agent['agentName']} answers: {body.get('inputText', '')}"
        usage = {"inputTokens": fake.usage[0], "outputTokens": fake.usage[1]}
        base = {"agentId": agent["agentId"], "agentAliasId": alias["agentAliasId"], "sessionId": session_id}
        events = [
            encode_event("trace", base | {"trace": {"orchestrationTrace": {"rationale": {"text": "route"}}}}),
            encode_event("chunk", {"bytes": base64.b64encode(reply[:10].encode()).decode()}),
            encode_event(
                "trace",
                base
                | {
                    "trace": {"orchestrationTrace": {"modelInvocationOutput": {"metadata": {"usage": usage}}}}
                },
            ),
            encode_event("chunk", {"bytes": base64.b64encode(reply[10:].encode()).decode()}),
        ]
        return web.Response(
            body=b"".join(events),
            headers={
                "Content-Type": "application/vnd.amazon.eventstream",
                "x-amzn-bedrock-agent-content-type": "application/json",
                "x-amz-bedrock-agent-session-id": session_id,
            },
        )

    app = web.Application(middlewares=[record])
    app.router.add_route("PUT", "/agents/", create_agent)
    app.router.add_route("GET", "/agents/{agentId}/", get_agent)
    app.router.add_route("POST", "/agents/{agentId}/", prepare_agent)
    app.router.add_route("DELETE", "/agents/{agentId}/", delete_agent)
    app.router.add_route("PUT", "/agents/{agentId}/agentaliases/", create_agent_alias)
    app.router.add_route("GET", "/agents/{agentId}/agentaliases/{agentAliasId}/", get_agent_alias)
    app.router.add_route("DELETE", "/agents/{agentId}/agentaliases/{agentAliasId}/", delete_agent_alias)
    app.router.add_route(
        "PUT", "/agents/{agentId}/agentversions/{agentVersion}/agentcollaborators/", associate
    )
    app.router.add_route(
        "POST", "/agents/{agentId}/agentAliases/{agentAliasId}/sessions/{sessionId}/text", invoke_agent
    )
    return app


def _public(agent: dict[str, Any]) -> dict[str, Any]:
    """An agent as the API returns it (without the fake's own bookkeeping)."""
    return {k: v for k, v in agent.items() if k != "versions"}
