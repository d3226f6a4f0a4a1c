"""POST /api/installs against the spec's platform field-support matrix (spec "Installs": "Platform
field support", "Sending a field not valid for the platform returns 400 naming the platform that
requires it"; Errors row 400).

One table: every (platform, optional field) cell, plus the platform and credential checks. Cells
that a platform accepts are run for `svc` and `orchB` (orchB against its fake upstream over real
HTTP); for orchA and orchC only the 400 answers are checked, which come before any upstream call.
Every 400 leaves nothing behind: no install record, no install token, no upstream request.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

import pytest

from config.catalogue import UPSTREAM
from tests.fakes.orch_b import FakeOrchB
from tests.support.accounts import bearer
from tests.support.installs import (
    ORCH_A_CREDENTIALS,
    ORCH_C_CREDENTIALS,
    PLATFORMS,
    install,
    nothing_written,
    orch_b_credentials,
    published_team,
    start_fake_orch_b,
)
from tests.support.templates import user_with_key

ORCH_B_CREDENTIALS = orch_b_credentials(FakeOrchB())
CREDENTIALS: dict[str, dict[str, str] | None] = {
    "svc": None,
    "orchA": ORCH_A_CREDENTIALS,
    "orchB": ORCH_B_CREDENTIALS,
    "orchC": ORCH_C_CREDENTIALS,
}

# Spec "Installs", platform field support, at install time (svc takes secrets only after install).
SUPPORT: dict[str, set[str]] = {
    "credentials": {"orchA", "orchB", "orchC"},
    "variables": {"svc", "orchA", "orchB", "orchC"},
    "secrets": {"orchA"},
    "model": {"orchA", "orchB", "orchC"},
    "companyId": {"orchA"},
    "companyName": {"orchA"},
    "adapterType": {"orchA"},
    "webhookUrl": {"orchA"},
    "cwd": {"orchA"},
}
SAMPLES: dict[str, Any] = {
    "credentials": ORCH_B_CREDENTIALS,
    "variables": {"company": "Acme", "tone": "dry"},
    "secrets": {"API_TOKEN": "tok-123"},
    "model": "providerB:standard",
    "companyId": "company-1",
    "companyName": "Acme Inc",
    "adapterType": "http",
    "webhookUrl": "https://hooks.example.com/agent",
    "cwd": "/srv/agents",
}
RUNNABLE = ("svc", "orchB")
PLATFORM_NAME = re.compile(r"\b(svc|orchA|orchB|orchC)\b")


@dataclass(frozen=True)
class Case:
    """One install body (the platform's valid credentials plus `fields`) and what it must answer.

    `platform` None leaves the field out. `mentions` must all appear in the error; `named`, when
    given, is exactly the set of platform ids the error names.
    """

    id: str
    platform: str | None
    fields: dict[str, Any] = field(default_factory=dict)
    status: int = 400
    mentions: tuple[str, ...] = ()
    named: frozenset[str] | None = None
    with_credentials: bool = True


def matrix() -> list[Case]:
    """Every cell of the support matrix that can be checked here."""
    cases = []
    for name, takers in SUPPORT.items():
        for platform in PLATFORMS:
            if platform not in takers:
                cases.append(
                    Case(
                        f"{platform}-{name}-refused",
                        platform,
                        {name: SAMPLES[name]},
                        mentions=(name,),
                        named=frozenset(takers | {platform}),
                    )
                )
            elif platform in RUNNABLE:
                cases.append(Case(f"{platform}-{name}-accepted", platform, {name: SAMPLES[name]}, 201))
    return cases


CASES = [
    *matrix(),
    Case("unknown-platform", "orchZ", mentions=("orchZ",), named=frozenset(PLATFORMS)),
    Case(
        "platform-omitted-is-orchA-needing-credentials",
        None,
        mentions=("credentials", "orchA"),
        with_credentials=False,
    ),
    Case(
        "platform-omitted-is-orchA-not-orchB",
        None,
        {"credentials": ORCH_B_CREDENTIALS},
        mentions=("credentials", "orchA"),
    ),
    Case("orchB-without-credentials", "orchB", mentions=("credentials", "orchB"), with_credentials=False),
    Case(
        "orchB-missing-region",
        "orchB",
        {"credentials": {k: v for k, v in ORCH_B_CREDENTIALS.items() if k != "region"}},
        mentions=("region", "orchB"),
    ),
    Case(
        "orchB-blank-api-key",
        "orchB",
        {"credentials": {**ORCH_B_CREDENTIALS, "apiKey": "  "}},
        mentions=("apiKey",),
    ),
    Case(
        "orchB-unknown-credential",
        "orchB",
        {"credentials": {**ORCH_B_CREDENTIALS, "token": "t"}},
        mentions=("token",),
    ),
    Case(
        "orchC-missing-role-arn",
        "orchC",
        {"credentials": {k: v for k, v in ORCH_C_CREDENTIALS.items() if k != "agentResourceRoleArn"}},
        mentions=("agentResourceRoleArn",),
    ),
    Case(
        "orchC-unknown-credential",
        "orchC",
        {"credentials": {**ORCH_C_CREDENTIALS, "apiKey": "x"}},
        mentions=("apiKey",),
    ),
    Case(
        "svc-undeclared-variable",
        "svc",
        {"variables": {"company": "Acme", "colour": "red"}},
        mentions=("colour",),
    ),
    Case("svc-variable-not-a-string", "svc", {"variables": {"company": 5}}, mentions=("company",)),
    Case("orchB-undeclared-variable", "orchB", {"variables": {"colour": "red"}}, mentions=("colour",)),
    Case("orchC-undeclared-variable", "orchC", {"variables": {"colour": "red"}}, mentions=("colour",)),
    Case(
        "orchB-top-level-orchA-credential",
        "orchB",
        {"orchABaseUrl": "http://127.0.0.1:9"},
        mentions=("orchABaseUrl", "orchA"),
    ),
]


@pytest.fixture
async def fake(aiohttp_server, monkeypatch) -> FakeOrchB:
    return await start_fake_orch_b(aiohttp_server, monkeypatch)


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
async def test_install_body_against_the_platform(make_client, store, fake, case):
    client = await make_client(rate_limit_multiplier=None)
    _, key = await user_with_key(client)
    template = await published_team(client, key)
    body: dict[str, Any] = {"templateId": template["id"]}
    if case.platform is not None:
        body["platform"] = case.platform
    credentials = CREDENTIALS.get(case.platform or "orchA")
    if case.with_credentials and credentials is not None:
        body["credentials"] = credentials
    body.update(case.fields)

    response = await install(client, key, **body)
    answer = await response.json()
    assert response.status == case.status, answer

    if case.status == 400:
        assert set(answer) == {"error"}
        for word in case.mentions:
            assert word in answer["error"], (word, answer)
        if case.named is not None:
            assert set(PLATFORM_NAME.findall(answer["error"])) == case.named, answer
        await nothing_written(store)
        assert fake.requests == []
        return

    assert answer["platform"] == case.platform
    assert [a["key"] for a in answer["deployedAgents"]] == ["lead", "writer"]
    doc = await store.installs.find_one({"_id": answer["installId"]})
    assert doc is not None and doc["status"] == "completed"
    listed = await client.get("/api/installs", headers=bearer(key))
    assert [i["id"] for i in (await listed.json())["installs"]] == [answer["installId"]]
    if "variables" in case.fields:
        assert doc["variables"] == case.fields["variables"]
    if case.platform == "orchB":
        upserts = [r.body for r in fake.requests if r.path.endswith("/agents/upsert")]
        assert len(upserts) == 2
        if "model" in case.fields:
            assert {u["model"] for u in upserts} == {UPSTREAM[case.fields["model"]]}
    else:
        assert fake.requests == []
