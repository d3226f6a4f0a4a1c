"""Schemathesis over /api/openapi.json: no 5xx, every answer fits its declared schema and content type.

The app runs as in every test (real HTTP on 127.0.0.1, the embedded database, local
Ray), with the fake model providers and the fake payment provider, so a 5xx can only
come from our code. Schemathesis generates requests from the document itself, valid
(positive) and invalid (negative) ones, with the credentials of a signed-up user who
owns a published template and a managed install; path parameters are the real ids
about half the time (so handlers past the ownership checks are reached) and random
otherwise. Destructive operations get random ids only, so the run keeps its user.

Bounded for `make test`: a fixed number of examples per operation and mode, no
shrinking, a fixed seed (Hypothesis' derandomize), so a run is repeatable and takes
about the same time on every machine.
"""

from __future__ import annotations

import asyncio
import os
import uuid
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import hypothesis
import hypothesis.errors
import pytest
import requests
import schemathesis
from hypothesis import HealthCheck, Phase, given
from hypothesis import strategies as st
from schemathesis import GenerationMode
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import content_type_conformance, response_schema_conformance

from config.settings import AppKey
from tests.fakes.llm import DEFAULT_KEY, FakeLLM
from tests.fakes.stripe import API_KEY, WEBHOOK_SECRET, FakeStripe
from tests.fakes.stripe import create_app as stripe_app
from tests.support.accounts import bearer, create_key, signup
from tests.support.orgs import make_pro

EXAMPLES = int(os.environ.get("SVC_FUZZ_EXAMPLES", "5"))
APP_KEY = "app-key-for-the-fuzz-run"
TEAM = {
    "version": "v1",
    "requiredVariables": ["company"],
    "requiredSecrets": ["CRM_TOKEN"],
    "agents": [
        {"key": "lead", "name": "Lead", "model": "providerA:small", "prompt": "Lead for {{company}}."},
        {"key": "writer", "name": "Writer", "model": "providerA:small", "prompt": "Go.", "reportsTo": "lead"},
    ],
}
# Operations that would end the run's own user, session, key or install when given the real ids.
DESTRUCTIVE = {
    "logout",
    "delete_key",
    "delete_install",
    "delete_template",
    "archive",
    "delete_org",
    "remove_member",
    "transfer_org",
    "revoke_org_key",
    "cancel_install",
    "webhook_trigger",  # its callbackUrl would be posted to, from a worker, after the test
}
SERVER_ERROR = {500, 501, 502, 503, 504}


@dataclass
class World:
    """The credentials and the real ids the generated requests use."""

    base_url: str
    headers: dict[str, str]
    ids: dict[str, list[str]] = field(default_factory=dict)


async def seed(client: Any) -> World:
    """A user with a key, a published template, an svc install and an org (all over HTTP)."""
    caller = await signup(client)
    key = await create_key(client, caller)
    auth = {**bearer(key), **caller.cookie}
    slug = f"fuzz-{uuid.uuid4().hex[:8]}"
    body = {"slug": slug, "name": "Fuzz", "visibility": "public", "definition": TEAM}
    template = await (await client.post("/api/templates", json=body, headers=auth)).json()
    published = await client.post(f"/api/templates/{template['id']}/publish", json={}, headers=auth)
    assert published.status == 200, await published.text()
    # The key that creates an svc install is linked (scoped) to it, so a second key does that.
    pipeline_key = await create_key(client, caller, label="pipeline")
    created = await client.post(
        "/api/installs",
        json={"templateId": template["id"], "platform": "svc", "variables": {"company": "Acme"}},
        headers=bearer(pipeline_key),
    )
    assert created.status == 201, await created.text()
    install_id = (await created.json())["installId"]
    org = await (await client.post("/api/orgs", json={"name": "Fuzz Org"}, headers=caller.cookie)).json()
    await make_pro(client, org["org"]["id"])  # so the Pro-only org routes answer past 402
    org_path = f"/api/orgs/{org['org']['slug']}"
    invited = {"email": "invitee@example.com", "role": "member"}
    await client.post(f"{org_path}/invitations", json=invited, headers=caller.cookie)
    await client.post(f"{org_path}/secrets", json={"key": "CRM_TOKEN", "value": "s3"}, headers=caller.cookie)
    base_url = str(client.server.make_url("")).rstrip("/")
    return World(
        base_url,
        auth,
        {
            "id": [template["id"], install_id],
            "installId": [install_id],
            "slug": [org["org"]["slug"]],
            "userId": [caller.id],
            "name": ["draft-approval", "target-review"],
            "a": ["1", "1.0.0"],
            "b": ["1"],
        },
    )


def credentials(world: World, auth: str, operation_id: str) -> dict[str, str]:
    """What a client with these credentials sends: the user's key and session, or the app key."""
    if operation_id == "logout":
        return {}
    if auth == "AK":
        return bearer(APP_KEY)
    return world.headers


def with_real_ids(operation: Any, mode: GenerationMode, real: dict[str, list[str]]) -> st.SearchStrategy[Any]:
    """Cases whose path parameters are real ids (the rest generated as usual)."""
    ids = st.fixed_dictionaries({name: st.sampled_from(values) for name, values in real.items()})
    return ids.flatmap(lambda params: operation.as_strategy(generation_mode=mode, path_parameters=params))


def examples(
    strategy: st.SearchStrategy[Any],
    world: World,
    session: requests.Session,
    headers: dict[str, str],
    declared: set[int],
    seen: Counter[int],
) -> Any:
    """A Hypothesis test that sends each generated case and checks its answer."""

    @hypothesis.settings(
        max_examples=EXAMPLES,
        derandomize=True,
        database=None,
        deadline=None,
        phases=[Phase.explicit, Phase.generate],
        suppress_health_check=list(HealthCheck),
    )
    @given(case=strategy)
    def check(case: Any) -> None:
        response = case.call(base_url=world.base_url, session=session, headers=headers)
        seen[response.status_code] += 1
        names = {name.lower(): value for name, value in response.headers.items()}
        if "x-request-id" not in names and str(names.get("content-type")).startswith("['text/plain"):
            # aiohttp's HTTP parser refused the request before the app saw it (a request line or
            # header over 8190 bytes) and answered in text/plain: issue 17 item 4, not this test's.
            assert response.status_code in (400, 413, 431), response.status_code
            return
        checks = [response_schema_conformance, content_type_conformance]
        # A 5xx the document declares (an upstream, an unconfigured provider) is an answer,
        # not a crash; any other one is a failure.
        if not (response.status_code in SERVER_ERROR and response.status_code in declared):
            checks.append(not_a_server_error)
        case.validate_response(response, checks=checks, headers=headers)

    return check


def describe(exc: BaseException) -> str:
    """The first lines of a failure and of each failure inside it (Hypothesis groups them)."""
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()][:8]
    for inner in getattr(exc, "exceptions", ()):
        lines.append(f"[{type(inner).__name__}] {describe(inner)}")
    return " / ".join(lines)[:1500]


def fuzz(world: World, document: dict[str, Any], statuses: dict[str, Counter[int]]) -> list[str]:
    """Run every operation in both modes; the failures, one line each (runs in a worker thread)."""
    schema = schemathesis.openapi.from_dict(document)
    failures: list[str] = []
    session = requests.Session()
    only = os.environ.get("SVC_FUZZ_ONLY", "")  # a part of "METHOD /path", to fuzz some operations
    for operation in (result.ok() for result in schema.get_all_operations()):
        if only not in operation.label:
            continue
        definition = operation.definition.raw
        operation_id = definition["operationId"]
        declared = {int(code) for code in definition["responses"] if code.isdigit()}
        headers = credentials(world, definition["x-auth"], operation_id)
        real = {
            name: ids
            for name, ids in world.ids.items()
            if f"{{{name}}}" in operation.path and operation_id not in DESTRUCTIVE
        }
        for mode in (GenerationMode.POSITIVE, GenerationMode.NEGATIVE):
            strategy = operation.as_strategy(generation_mode=mode)
            if real:
                strategy = st.one_of(strategy, with_real_ids(operation, mode, real))

            seen = statuses.setdefault(operation.label, Counter())
            check = examples(strategy, world, session, headers, declared, seen)
            try:
                check()
            except hypothesis.errors.Unsatisfiable:
                continue  # nothing of this operation can be made invalid (no parameters, no body)
            except (Exception, BaseExceptionGroup) as exc:
                failures.append(f"{operation.label} [{mode.value}]: {describe(exc)}")
    return failures


@pytest.fixture
async def fuzz_client(aiohttp_server: Any, make_client: Any) -> Any:
    """The app with fake model providers and a fake payment provider behind it."""
    providers = {}
    for name in ("providerA", "providerB", "providerC"):
        fake = FakeLLM(name)
        server = await aiohttp_server(fake.app())
        providers[name] = {"api_key": DEFAULT_KEY, "base_url": fake.url(server)}
    stripe = FakeStripe()
    stripe_server = await aiohttp_server(stripe_app(stripe))
    stripe.base_url = str(stripe_server.make_url("")).rstrip("/")
    return await make_client(
        providers=providers,
        rate_limit_multiplier=None,
        app_api_keys=(AppKey(key=APP_KEY),),
        stripe_api_key=API_KEY,
        stripe_api_base=stripe.base_url,
        stripe_webhook_secret=WEBHOOK_SECRET,
    )


async def test_every_operation_survives_generated_requests(fuzz_client: Any) -> None:
    world = await seed(fuzz_client)
    document = await (await fuzz_client.get("/api/openapi.json")).json()
    statuses: dict[str, Counter[int]] = {}
    failures = await asyncio.to_thread(fuzz, world, document, statuses)
    # The table shows what was reached (pytest -s or -rA prints it).
    for label, seen in statuses.items():
        print(f"{label:60} {dict(sorted(seen.items()))}")
    print(f"{sum(map(sum, (c.values() for c in statuses.values())))} requests, {len(statuses)} operations")
    assert not failures, f"{len(failures)} failing operation(s):\n" + "\n".join(failures)
