"""`svc keys rotate`: every stored secret re-encrypted under the newest key, in batches, resumable
after a crash, audited; afterwards the old key can be dropped and everything still decrypts.

The secrets are made the way users make them (over HTTP, with the old key), and what is checked
afterwards is found without the rotation's own list: every field named `...Encrypted` in every
collection of the database.
"""

from __future__ import annotations

import ast
import asyncio
import json
import re
from pathlib import Path
from typing import Any

import pytest
from cryptography.fernet import Fernet
from pymongo import MongoClient

from svc.core import Conflict, Store, Vault
from svc.core.rekey import COLLECTION, Rekeying
from svc.core.vault import VaultError
from svc.key_rotation import FIELDS, rotate_keys
from tests.support.accounts import Caller, bearer, create_key, signup
from tests.support.cli import run_cli
from tests.support.installs import install_ok, published_team
from tests.support.orgs import create_org, make_pro, ok, org_key, send, world
from tests.support.source import parse
from tests.support.templates import publish_template
from tests.support.upgrades import move_ok, publish_next, team

ROOT = Path(__file__).resolve().parent.parent


async def secrets_written(client: Any) -> tuple[Caller, str]:
    """One value of every kind the service encrypts, made over HTTP; the owner and their key."""
    owner = await signup(client)
    key = await create_key(client, owner, label="laptop")  # api_keys.keyEncrypted
    template = await published_team(client, key)
    for n in range(3):  # installs: secrets, credentials, platform state, webhook secret and token
        install = await install_ok(
            client,
            key,
            templateId=template["id"],
            platform="svc",
            variables={"company": "Acme", "tone": "dry"},
        )
        path = f"/api/installs/{install['installId']}"
        secrets = {"API_TOKEN": f"token-{n}", "CRM_KEY": f"crm-{n}"}
        response = await client.patch(f"{path}/secrets", json=secrets, headers=bearer(key))
        assert response.status == 200, await response.text()  # and vault_secrets, remembered
        response = await client.post(f"{path}/callback-secret", headers=bearer(key))
        assert response.status == 201, await response.text()
    org = await create_org(client, owner)
    await make_pro(client, org["id"])
    await ok(
        await send(
            client,
            owner,
            "POST",
            f"/api/orgs/{org['slug']}/secrets",
            {"key": "OPENAI", "value": "org-secret-value"},
        )
    )
    return owner, key


async def stored_values(store: Store) -> dict[tuple[str, str, str], str]:
    """(collection, id, path) -> token for every `...Encrypted` field anywhere in the database,
    sub-documents included."""
    found: dict[tuple[str, str, str], str] = {}

    def walk(collection: str, doc_id: str, prefix: str, doc: dict[str, Any]) -> None:
        for field, value in doc.items():
            if not field.endswith("Encrypted"):
                if isinstance(value, dict):
                    walk(collection, doc_id, f"{prefix}{field}.", value)
                continue
            if isinstance(value, dict):
                found.update({(collection, doc_id, f"{prefix}{field}.{k}"): v for k, v in value.items()})
            elif isinstance(value, str):
                found[(collection, doc_id, f"{prefix}{field}")] = value

    for collection in await store.db.list_collection_names():
        async for doc in store[collection].find({}):
            walk(collection, str(doc["_id"]), "", doc)
    return found


def plain(vault: Vault, values: dict[tuple[str, str, str], str]) -> dict[tuple[str, str, str], str]:
    return {where: vault.decrypt(token) for where, token in values.items()}


@pytest.fixture
def keys(secret_key: str) -> tuple[str, str]:
    """(the old key the apps start with, the new one)."""
    return secret_key, Fernet.generate_key().decode()


async def test_after_a_rotation_the_old_key_can_be_dropped(make_client, store, keys):
    old, new = keys
    client = await make_client(secret_keys=(old,), rate_limit_multiplier=None)
    owner, key = await secrets_written(client)
    before = await stored_values(store)
    # Every kind but a move's secrets waiting for approval (the next test makes one).
    written = {(f.collection, f.field) for f in FIELDS if not f.field.startswith("pendingUpgrade.")}
    assert {(c, p.split(".")[0]) for c, _, p in before} == written
    secrets = plain(Vault([old]), before)

    report = await rotate_keys(store, Vault([new, old]), batch=2)

    assert report["finished"] and report["oldKeysCanBeDropped"]
    assert report["totals"]["reencrypted"] == report["totals"]["values"] == len(before)
    after = await stored_values(store)
    assert set(after) == set(before) and not set(after.values()) & set(before.values())
    assert plain(Vault([new]), after) == secrets  # the new key alone decrypts everything
    with pytest.raises(VaultError):
        Vault([old]).decrypt(next(iter(after.values())))
    # A service started with the new key only answers what needs a decryption.
    fresh = await make_client(secret_keys=(new,), rate_limit_multiplier=None)
    listed = await ok(await fresh.get("/api/auth/keys", headers=owner.cookie))
    assert key in json.dumps(listed)
    # Audited, with counts and the key's fingerprint, never a value.
    entries = await store["timeline"].find({"kind": "key"}).sort("_id").to_list(None)
    assert [e["action"] for e in entries] == ["vault.rotation_started", "vault.rotation_finished"]
    assert entries[1]["meta"]["totals"]["reencrypted"] == len(before)
    shown = json.dumps(entries, default=str)
    assert not [value for value in (old, new, *secrets.values()) if len(value) > 5 and value in shown]
    # A second run finds nothing to do and says so.
    again = await rotate_keys(store, Vault([new, old]))
    assert again["totals"]["reencrypted"] == 0 and again["totals"]["current"] == len(before)
    assert again["pass"] == 2 and again["oldKeysCanBeDropped"]


async def test_the_secrets_of_a_move_waiting_for_approval_are_rotated_and_applied_later(
    make_client, store, keys
):
    """Issue 34: a MAJOR move under an org's governance keeps its new secrets (encrypted) until it
    is approved; a rotation re-encrypts them, so the approval still applies them after the old
    key is dropped."""
    old, new = keys
    client = await make_client(secret_keys=(old,), rate_limit_multiplier=None)
    w = await world(client, pro=True)
    key = await org_key(client, w.admin, w.slug)
    template = await publish_template(client, key, definition=team(), name="Gated Team")
    install_id = (await install_ok(client, key, templateId=template["id"], platform="svc"))["installId"]
    await ok(await send(client, w.admin, "PATCH", f"{w.base}/settings/governance", {"enabled": True}))
    await publish_next(client, key, template["id"], {**team(), "requiredSecrets": ["CRM_KEY"]}, "CRM")
    asked = await move_ok(client, bearer(key), install_id, secrets={"CRM_KEY": "crm-value"})
    assert asked["status"] == "pending_approval"
    where = ("installs", install_id, "pendingUpgrade.secretsEncrypted.CRM_KEY")
    assert Vault([old]).decrypt((await stored_values(store))[where]) == "crm-value"

    report = await rotate_keys(store, Vault([new, old]))
    assert report["finished"] and report["oldKeysCanBeDropped"]
    assert Vault([new]).decrypt((await stored_values(store))[where]) == "crm-value"

    fresh = await make_client(secret_keys=(new,), rate_limit_multiplier=None)
    path = f"{w.base}/approvals/{asked['approvalId']}"
    await ok(await send(fresh, w.owner, "PATCH", path, {"status": "approved"}))
    install = await store.installs.find_one({"_id": install_id})
    assert install["templateVersion"] == 2 and not install.get("pendingUpgrade")
    assert Vault([new]).decrypt(install["secretsEncrypted"]["CRM_KEY"]) == "crm-value"


async def test_an_interrupted_rotation_leaves_everything_readable_and_the_next_run_finishes(
    make_client, store, keys
):
    old, new = keys
    client = await make_client(secret_keys=(old,), rate_limit_multiplier=None)
    await secrets_written(client)
    secrets = plain(Vault([old]), await stored_values(store))

    class Crash(Exception):
        pass

    def crash_after_two(step: dict[str, Any]) -> None:
        if step["checkpoint"]["tallies"].get(step["collection"], {}).get("documents", 0) >= 2:
            raise Crash  # the process dies right after a checkpoint

    with pytest.raises(Crash):
        await rotate_keys(store, Vault([new, old]), batch=1, progress=crash_after_two)
    halfway = await stored_values(store)
    assert plain(Vault([new, old]), halfway) == secrets, "nothing is left undecryptable"
    moved = [w for w, token in halfway.items() if Vault([new]).can_decrypt(token)]
    assert 0 < len(moved) < len(secrets), "the crash came half-way"
    checkpoint = await store[COLLECTION].find_one({})
    assert checkpoint["finishedAt"] is None and checkpoint["cursors"]

    report = await rotate_keys(store, Vault([new, old]), batch=1)
    assert report["runs"] == 2 and report["pass"] == 1 and report["oldKeysCanBeDropped"]
    assert report["totals"]["reencrypted"] == len(secrets), "each value re-encrypted once over both runs"
    assert plain(Vault([new]), await stored_values(store)) == secrets


async def test_a_value_no_key_decrypts_is_named_and_left_alone(make_client, store, keys):
    old, new = keys
    client = await make_client(secret_keys=(old,), rate_limit_multiplier=None)
    await secrets_written(client)
    lost = Vault([Fernet.generate_key().decode()]).encrypt("written with a key nobody kept")
    install = await store.installs.find_one({})
    await store.installs.update_one({"_id": install["_id"]}, {"$set": {"secretsEncrypted.LOST": lost}})

    report = await rotate_keys(store, Vault([new, old]))
    assert report["finished"] and not report["oldKeysCanBeDropped"]
    assert report["totals"]["undecryptable"] == 1
    assert report["undecryptable"] == [f"installs {install['_id']} secretsEncrypted.LOST"]
    assert (await store.installs.find_one({"_id": install["_id"]}))["secretsEncrypted"]["LOST"] == lost


async def test_rotation_needs_a_new_key_and_one_run_at_a_time(store, keys):
    old, new = keys
    with pytest.raises(Exception, match="nothing to rotate to: SVC_SECRET_KEYS holds one key"):
        await rotate_keys(store, Vault([old]))
    assert await store[COLLECTION].count_documents({}) == 0
    await store.installs.insert_many(
        [{"_id": f"{n:024x}", "webhookSecretEncrypted": Vault([old]).encrypt("s")} for n in range(30)]
    )
    outcomes = await asyncio.gather(
        *(rotate_keys(store, Vault([new, old]), batch=1) for _ in range(2)), return_exceptions=True
    )
    refused = [o for o in outcomes if isinstance(o, Conflict)]
    assert len(refused) == 1 and "another svc keys rotate is running" in refused[0].message
    assert plain(Vault([new]), await stored_values(store)) == {w: "s" for w in await stored_values(store)}


def test_the_command_reports_and_exits_by_what_is_left(db_uri, keys, tmp_path, monkeypatch, capsys):
    """`svc keys rotate` as an operator runs it (in this process: tests/support/cli.py)."""
    old, new = keys
    with MongoClient(db_uri) as client:
        installs = client.get_default_database().installs
        installs.insert_one({"_id": "a" * 24, "credentialsEncrypted": Vault([old]).encrypt("{}")})
    monkeypatch.chdir(tmp_path)  # no .env of the checkout
    monkeypatch.setenv("SVC_MONGODB_URI", db_uri)
    monkeypatch.setenv("SVC_DATA_DIR", str(tmp_path))

    def command(secret_keys: str) -> tuple[int, str, str]:
        monkeypatch.setenv("SVC_SECRET_KEYS", secret_keys)
        status = run_cli(["keys", "rotate", "--batch", "5"])
        out, err = capsys.readouterr()
        return status, out, err

    status, out, err = command(old)
    assert (
        status == 1 and out == "" and err.startswith("error: nothing to rotate to") and err.count("\n") == 1
    )
    status, out, err = command(f"{new},{old}")
    assert status == 0, err
    assert json.loads(out)["totals"]["reencrypted"] == 1
    assert "installs: 1 documents read, 1 values re-encrypted" in err
    assert err.rstrip().endswith("the old keys can be dropped")
    assert old not in out + err and new not in out + err
    with pytest.raises(SystemExit):  # argparse refuses a batch out of range, in one line
        run_cli(["keys", "rotate", "--batch", "0"])
    assert "a whole number from 1 to 10000" in capsys.readouterr().err


def test_every_encrypted_field_the_code_writes_is_rotated():
    """A `...Encrypted` field named anywhere in the domain is in the rotation's list."""
    named = set()
    for path in (ROOT / "svc").rglob("*.py"):
        for node in ast.walk(parse(path.read_text())):
            if isinstance(node, ast.Constant) and isinstance(node.value, str):
                named |= {m.split(".")[-1] for m in re.findall(r"^[\w.]*?(\w+Encrypted)\b", node.value)}
    assert named, "the scan finds the fields"
    assert sorted(named - {f.field for f in FIELDS}) == []


def test_the_walk_uses_the_first_key_as_the_newest(keys):
    old, new = keys
    rekeying = Rekeying(Store.__new__(Store), Vault([new, old]), FIELDS)
    assert rekeying.id == Rekeying(Store.__new__(Store), Vault([new]), FIELDS).id
    assert rekeying.id != Rekeying(Store.__new__(Store), Vault([old, new]), FIELDS).id
