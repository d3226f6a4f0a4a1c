"""Assisted authoring: generate, assist and test-chat, as streams of events.

Each entry point validates its input and its model first (raising before any
event, so the API answers an ordinary 400), then returns an async iterator of
events: `{chunk}` as the model streams, and a final `{done: true, ...}` or an
`{error}`. The prompts live in config/prompts/ with the team schema inserted from
the same generator as GET /api/schema/team/v1.json.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from functools import cache
from importlib import resources
from typing import Any, Literal

from pydantic import Field, ValidationError

from config.catalogue import AGENT_MODELS, AUTHORING
from plugins.types import ChatMessage
from svc.authoring.mcp_chat import mcp_chat
from svc.core import BadRequest, RequestBody, ServiceError, describe
from svc.runtime import LLM, McpService, root_agent
from svc.templates import TeamDefinition, check_definition, diff_summary, json_schema

Event = dict[str, Any]
MAX_TOKENS = 8192


class Message(RequestBody):
    """One turn of a conversation."""

    role: Literal["user", "assistant"]
    content: str = Field(max_length=100_000)


class GenerateBody(RequestBody):
    """POST /api/templates/generate and /generate/public."""

    description: str = Field(max_length=20_000)
    model: str | None = Field(default=None, max_length=100)


class AssistBody(RequestBody):
    """POST /api/templates/assist."""

    currentDefinition: dict[str, Any]
    instruction: str = Field(max_length=20_000)
    model: str | None = Field(default=None, max_length=100)
    conversationHistory: list[Message] | None = Field(default=None, max_length=50)


class TestChatBody(RequestBody):
    """POST /api/templates/test-chat."""

    definition: dict[str, Any]
    messages: list[Message] = Field(min_length=1, max_length=100)


@cache
def prompt_text(name: str) -> str:
    """A prompt file of config/prompts/."""
    return resources.files("config").joinpath("prompts", f"{name}.txt").read_text()


def prompt(name: str, **values: str) -> str:
    """The prompt with `{schema}`, `{models}` and the given values filled in."""
    text = prompt_text(name)
    values = {"schema": json.dumps(json_schema()), "models": ", ".join(AGENT_MODELS), **values}
    for key, value in values.items():
        text = text.replace("{" + key + "}", value)
    return text


def pick_model(endpoint: str, requested: str | None) -> str:
    """The endpoint's default, or the requested model if the endpoint accepts it (400 otherwise)."""
    rules = AUTHORING[endpoint]
    if requested is None:
        return rules.default
    accepted = rules.accepted or AGENT_MODELS
    if requested not in accepted:
        raise BadRequest(f"model: must be one of {', '.join(accepted)}")
    return requested


def definition_of(text: str) -> tuple[dict[str, Any] | None, str | None]:
    """The validated definition in a model's answer, or the reason there is none."""
    if "{" not in text:
        return None, "the answer holds no JSON object"
    try:
        data = json.loads(text[text.index("{") : text.rindex("}") + 1])
        definition = TeamDefinition.model_validate(data)
        check_definition(definition)
    except ValueError as exc:
        if isinstance(exc, ValidationError):
            return None, describe(exc, limit=10)
        return None, f"not valid JSON ({exc})"
    except ServiceError as exc:
        return None, exc.message
    return definition.model_dump(mode="json", exclude_none=True), None


def parse_definition_body(data: dict[str, Any], field: str) -> TeamDefinition:
    """A definition from a request body, or 400 naming the path."""
    try:
        definition = TeamDefinition.model_validate(data)
    except ValidationError as exc:
        raise BadRequest("; ".join(f"{field}.{part}" for part in describe(exc).split("; "))) from None
    check_definition(definition, field)
    return definition


class Authoring:
    """The streaming authoring endpoints' logic."""

    def __init__(self, llm: LLM, mcp: McpService | None = None) -> None:
        self.mcp = mcp  # a test chat's MCP tools (svc/authoring/mcp_chat.py)
        self.llm = llm

    def _ready(self, model: str) -> None:
        """Fail before streaming when the model's provider is not configured."""
        self.llm.request(model, "", [])

    def generate(self, body: GenerateBody, public: bool) -> AsyncIterator[Event]:
        """A team definition from a description."""
        if not body.description.strip():
            raise BadRequest("description: must not be empty")
        model = pick_model("generatePublic" if public else "generate", None if public else body.model)
        self._ready(model)
        system = prompt("generate")
        return self._definition_stream(model, system, [ChatMessage("user", body.description)])

    def assist(self, body: AssistBody) -> AsyncIterator[Event]:
        """APPLY an instruction to a definition, or DISCUSS it."""
        if not body.instruction.strip():
            raise BadRequest("instruction: must not be empty")
        current = parse_definition_body(body.currentDefinition, "currentDefinition")
        model = pick_model("assist", body.model)
        self._ready(model)
        old = current.model_dump(mode="json", exclude_none=True)
        system = prompt("assist", definition=json.dumps(old))
        history = [ChatMessage(m.role, m.content) for m in body.conversationHistory or []]
        return self._assist_stream(model, system, [*history, ChatMessage("user", body.instruction)], old)

    def test_chat(self, body: TestChatBody) -> AsyncIterator[Event]:
        """The root agent's reply to the last message, the earlier ones as context."""
        definition = parse_definition_body(body.definition, "definition")
        if body.messages[-1].role != "user":
            raise BadRequest("messages: the last message must be from the user")
        if not body.messages[-1].content.strip():
            raise BadRequest("messages: the last message must not be empty")
        root = root_agent(definition.model_dump(mode="json"))
        model = root.get("model") or AUTHORING["testChat"].default
        self._ready(model)
        # The prompt goes as written: no secrets or variables are filled in.
        messages = [ChatMessage(m.role, m.content) for m in body.messages]
        if self.mcp is not None and root.get("mcpServers"):  # the root agent's MCP tools, under its policy
            dumped = definition.model_dump(mode="json", exclude_none=True)
            return mcp_chat(self.llm, self.mcp, model, root, dumped, messages, MAX_TOKENS)
        return self._chat_stream(model, root.get("prompt") or "", messages)

    async def _text(
        self, model: str, system: str, messages: list[ChatMessage], into: list[str]
    ) -> AsyncIterator[Event]:
        stream = await self.llm.stream(model, system, messages, max_tokens=MAX_TOKENS)
        async for chunk in stream:
            if chunk.text:
                into.append(chunk.text)
                yield {"chunk": chunk.text}

    async def _definition_stream(
        self, model: str, system: str, messages: list[ChatMessage]
    ) -> AsyncIterator[Event]:
        parts: list[str] = []
        async for event in self._text(model, system, messages, parts):
            yield event
        definition, problem = await self._validated("".join(parts), model, system, messages)
        if definition is None:
            yield {"error": f"The generated definition is not valid: {problem}"}
            return
        yield {"done": True, "definition": definition}

    async def _validated(
        self, text: str, model: str, system: str, messages: list[ChatMessage]
    ) -> tuple[dict[str, Any] | None, str | None]:
        """The definition in the answer, after at most one repair round with the errors fed back."""
        definition, problem = definition_of(text)
        if definition is not None:
            return definition, None
        repair = [
            *messages,
            ChatMessage("assistant", text),
            ChatMessage("user", prompt("repair", errors=problem or "")),
        ]
        answer = await self.llm.complete(model, system, repair, max_tokens=MAX_TOKENS)
        return definition_of(answer.text)

    async def _assist_stream(
        self, model: str, system: str, messages: list[ChatMessage], old: dict[str, Any]
    ) -> AsyncIterator[Event]:
        parts: list[str] = []
        async for event in self._text(model, system, messages, parts):
            yield event
        text = "".join(parts)
        if not text.lstrip().startswith("{"):
            yield {"done": True, "text": text}  # DISCUSS
            return
        definition, problem = await self._validated(text, model, system, messages)
        if definition is None:
            yield {"error": f"The edited definition is not valid: {problem}"}
            return
        yield {"done": True, "definition": definition, "diffSummary": diff_summary(old, definition)}

    async def _chat_stream(
        self, model: str, system: str, messages: list[ChatMessage]
    ) -> AsyncIterator[Event]:
        async for event in self._text(model, system, messages, []):
            yield event
        yield {"done": True}
