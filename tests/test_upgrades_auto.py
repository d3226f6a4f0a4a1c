"""Automatic upgrades, driven the way the job runner drives them (svc/jobs.py ticks), checked
over HTTP: PATCH (or PATCH and MINOR) versions are applied to opted-in installs, others mailed
once instead, in bounded batches that resume after a crashed batch (docs/upgrades.md)."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from api.context import SERVICES
from svc.core import utcnow
from svc.installs import AutoUpgrades
from svc.installs.auto_upgrades import COLLECTION, LEASE, STATE_ID
from svc.jobs import Jobs
from tests.support.accounts import app_store, bearer
from tests.support.installs import install_ok
from tests.support.templates import agent, publish_template, user_with_key
from tests.support.upgrades import LOCKED, policy, publish_next, team, versions, with_agents


def lead(**fields: Any) -> dict[str, Any]:
    return agent(
        "lead", **{"name": "Lead", "prompt": "You lead.", "accessPolicy": policy("api.example.com"), **fields}
    )


async def opted(client: Any, key: str, template_id: str, mode: str, **install: Any) -> str:
    made = await install_ok(client, key, templateId=template_id, platform="svc", **install)
    response = await client.patch(
        f"/api/installs/{made['installId']}/auto-upgrade", json={"mode": mode}, headers=bearer(key)
    )
    assert response.status == 200 and await response.json() == {
        "installId": made["installId"],
        "autoUpgrade": mode,
    }
    return str(made["installId"])


def job(client: Any, batch: int = 20) -> AutoUpgrades:
    services = client.server.app[SERVICES]
    return AutoUpgrades(services.store, services.upgrades, services.settings.public_url, batch=batch)


async def mails(client: Any, kind: str) -> list[dict[str, Any]]:
    return list(await app_store(client)["outbox"].find({"kind": kind}).to_list(None))


async def drain(auto: AutoUpgrades) -> None:
    """Tick until the job has nothing left (each tick is one bounded batch)."""
    for _ in range(50):
        await auto.tick(utcnow())
        state = await auto.store[COLLECTION].find_one({"_id": STATE_ID})
        if state["current"] is None and not await auto.store["template_versions"].count_documents(
            {"publishedAt": {"$gt": state["after"]["publishedAt"]}}
        ):
            return
    raise AssertionError("the job never caught up")


async def test_patch_and_minor_versions_follow_each_installs_setting(client):
    _, key = await user_with_key(client)
    template = await publish_template(client, key, definition=team())
    patch_only = await opted(client, key, template["id"], "patch")
    minor_too = await opted(client, key, template["id"], "minor")
    manual = (await install_ok(client, key, templateId=template["id"], platform="svc"))["installId"]
    auto = job(client)
    await auto.tick(utcnow())  # the job starts from now: earlier versions are not replayed

    await publish_next(client, key, template["id"], team("patched"), "a fix")
    await drain(auto)
    now = {
        i: (await versions(client, bearer(key), i))["currentVersion"] for i in (patch_only, minor_too, manual)
    }
    assert now == {patch_only: 2, minor_too: 2, manual: 1}
    entry = (await versions(client, bearer(key), patch_only))["history"][0]
    assert (entry["action"], entry["actorId"], entry["via"]) == ("upgrade", None, "auto-upgrade")

    helper = agent("helper", name="Helper", accessPolicy=LOCKED)
    await publish_next(
        client, key, template["id"], with_agents(team("patched"), lead(prompt="patched"), helper), "a helper"
    )
    await drain(auto)
    assert (await versions(client, bearer(key), minor_too))["currentVersion"] == 3
    assert (await versions(client, bearer(key), patch_only))["currentVersion"] == 2
    (notice,) = await mails(client, "install.upgrade_available")
    assert patch_only in notice["body"] and "MINOR version" in notice["body"]
    await drain(auto)
    assert len(await mails(client, "install.upgrade_available")) == 1, "mailed once per version"


async def test_widened_permissions_or_missing_values_are_mailed_instead(client):
    _, key = await user_with_key(client)
    base = {**team(), "requiredVariables": ["company"]}
    base["agents"][0]["prompt"] = "Lead {{company}}."
    template = await publish_template(client, key, definition=base)
    without_value = await opted(client, key, template["id"], "minor")  # installed without `company`
    with_value = await opted(client, key, template["id"], "minor", variables={"company": "Acme"})
    auto = job(client)
    await auto.tick(utcnow())

    wider = {
        **base,
        "agents": [lead(prompt="Lead {{company}}.", accessPolicy=policy("api.example.com", "x.example.com"))],
    }
    await publish_next(client, key, template["id"], wider, "reaches x")
    await drain(auto)
    for install_id in (without_value, with_value):
        assert (await versions(client, bearer(key), install_id))["currentVersion"] == 1
    bodies = {m["body"].split()[2]: m["body"] for m in await mails(client, "install.upgrade_available")}
    assert "reach more than before (lead)" in bodies[with_value]
    assert "needs values the install lacks: company" in bodies[without_value]


async def test_batches_are_bounded_and_resume_after_a_crashed_batch(client):
    _, key = await user_with_key(client)
    template = await publish_template(client, key, definition=team())
    installs = [await opted(client, key, template["id"], "patch") for _ in range(5)]
    auto = job(client, batch=2)
    await auto.tick(utcnow())
    await publish_next(client, key, template["id"], team("patched"), "a fix")

    assert await auto.tick(utcnow()) == 2
    store = auto.store
    state = await store[COLLECTION].find_one({"_id": STATE_ID})
    assert state["current"]["afterInstall"] == sorted(installs)[1]
    # A scheduler dies holding the lease: nobody else runs the batch until the lease runs out.
    crashed = utcnow()
    await store[COLLECTION].update_one(
        {"_id": STATE_ID}, {"$set": {"token": "dead", "leaseUntil": crashed + LEASE}}
    )
    assert await auto.tick(crashed) == 0
    assert await auto.tick(crashed + LEASE + timedelta(seconds=1)) == 2
    await drain(auto)
    for install_id in installs:
        state = await versions(client, bearer(key), install_id)
        assert state["currentVersion"] == 2 and len(state["history"]) == 2, "each moved exactly once"


async def test_the_job_runner_runs_the_automatic_upgrades(client):
    _, key = await user_with_key(client)
    template = await publish_template(client, key, definition=team())
    install_id = await opted(client, key, template["id"], "patch")
    jobs = Jobs.for_services(client.server.app[SERVICES])
    await jobs.tick()
    await publish_next(client, key, template["id"], team("patched"), "a fix")
    await jobs.tick()
    assert (await versions(client, bearer(key), install_id))["currentVersion"] == 2
