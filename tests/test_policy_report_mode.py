"""Access policies in report mode (Smokescreen's report-only): decided and logged, never blocked."""

from __future__ import annotations

import pytest

from svc.templates.definitions import AccessPolicy
from tests.support.runtime import member, provider_settings, start_llm, start_target, svc_install


def http_call(url: str) -> dict:
    return {"name": "http_request", "arguments": {"method": "GET", "url": url}}


POLICY = {
    "accessPolicyVersion": "1",
    "mode": "report",
    "defaultAction": "deny",
    "rules": [
        {"match": {"pathPrefix": "/ok"}, "action": "allow"},
        {"match": {"pathPrefix": "/no"}, "action": "deny", "reason": "not for agents"},
        {"match": {"pathPrefix": "/ask"}, "action": "require_approval", "reason": "sensitive"},
    ],
}


async def test_report_mode_logs_the_would_be_blocks_and_blocks_nothing(make_client, aiohttp_server):
    llm, url = await start_llm(aiohttp_server)
    client = await make_client(rate_limit_multiplier=None, providers=provider_settings(url))
    target = await start_target(aiohttp_server)
    _, key, install_id = await svc_install(client, [member("lead", accessPolicy=POLICY)])
    llm.script(
        tool_calls=[
            http_call(f"{target.base}/ok"),
            http_call(f"{target.base}/no"),
            http_call(f"{target.base}/ask"),
        ]
    )
    llm.script(text='{"decision": "block", "reasoning": "not needed", "confidence": 0.9}')
    llm.script(text="done")
    response = await client.post(f"/api/installs/{install_id}/run", json={"task": "go"}, headers=key)
    assert (await response.json())["status"] == "completed"
    # Nothing the policy would block was blocked: every request to the target went out.
    assert [r["path"] for r in target.received] == ["/ok", "/no", "/ask"]
    log = await (await client.get(f"/api/installs/{install_id}/security/requests", headers=key)).json()
    by_path = {entry["path"]: entry for entry in log["requests"]}
    assert len(log["requests"]) == 3, "one entry per request"
    assert (by_path["/ok"]["decision"], by_path["/ok"]["reportOnly"]) == ("ALLOW", False)
    assert (by_path["/no"]["decision"], by_path["/no"]["reason"]) == ("BLOCK", "not for agents")
    assert by_path["/no"]["reportOnly"] is True and by_path["/no"]["statusCode"] == 200
    assert by_path["/ask"]["decision"] == "JUDGE" and by_path["/ask"]["reportOnly"] is True
    assert by_path["/ask"]["judgeReasoning"] == "not needed" and by_path["/ask"]["statusCode"] == 200
    policies = await (await client.get(f"/api/installs/{install_id}/policies", headers=key)).json()
    assert policies["agents"][0]["policy"]["mode"] == "report"


async def test_the_egress_guard_is_never_in_report_mode(make_client, aiohttp_server):
    llm, url = await start_llm(aiohttp_server)
    client = await make_client(
        rate_limit_multiplier=None, providers=provider_settings(url), egress_allow_private=False
    )
    _, key, install_id = await svc_install(client, [member("lead", accessPolicy=POLICY)])
    llm.script(tool_calls=[http_call("http://169.254.169.254/latest/meta-data")])
    llm.script(text="done")
    await client.post(f"/api/installs/{install_id}/run", json={"task": "go"}, headers=key)
    log = await (await client.get(f"/api/installs/{install_id}/security/requests", headers=key)).json()
    (entry,) = log["requests"]
    assert entry["decision"] == "BLOCK" and entry["reportOnly"] is False
    assert entry["reason"].startswith("Egress guard") and entry["statusCode"] is None


def test_report_mode_is_optional_and_validated_like_enforce_mode():
    """Old definitions (no mode) stay valid and enforce; a report policy is checked the same way."""
    assert AccessPolicy.model_validate({"accessPolicyVersion": "1"}).mode == "enforce"
    with pytest.raises(ValueError, match="mode"):
        AccessPolicy.model_validate({"accessPolicyVersion": "1", "mode": "audit"})
    with pytest.raises(ValueError):
        AccessPolicy.model_validate({**POLICY, "rules": [{"match": {}, "action": "explode"}]})
