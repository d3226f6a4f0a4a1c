"""Password hashes: scrypt at the configured cost, and a hash keeps the cost it was made with."""

import pytest

from config.settings import Settings, SettingsError
from svc.identity.passwords import COST, dummy_hash, hash_password, verify_password


def test_a_hash_records_its_cost_and_verifies_under_any_setting() -> None:
    strong, light = hash_password("correct horse", 14), hash_password("correct horse", 10)
    assert strong.split("$")[:4] == ["scrypt", str(2**14), "8", "1"]
    assert light.split("$")[1] == str(2**10)
    assert verify_password("correct horse", strong) and verify_password("correct horse", light)
    assert not verify_password("wrong horse", strong) and not verify_password("correct horse", "md5$x")
    assert dummy_hash(10).split("$")[1] == str(2**10)


def test_the_cost_defaults_to_the_interactive_figure_and_is_bounded() -> None:
    assert Settings.from_env({}).password_cost == COST == 14
    assert Settings.from_env({"SVC_PASSWORD_COST": "12"}).password_cost == 12
    for bad in ("9", "21", "fast"):
        with pytest.raises(SettingsError, match="SVC_PASSWORD_COST"):
            Settings.from_env({"SVC_PASSWORD_COST": bad})


async def test_sign_up_and_login_under_a_lower_cost(make_client, store) -> None:
    client = await make_client(password_cost=11)
    body = {"email": "cost@example.com", "password": "long enough pw", "name": "C"}
    assert (await client.post("/api/auth/signup", json=body)).status == 201
    user = await store["users"].find_one({"email": "cost@example.com"})
    assert user["passwordHash"].split("$")[1] == str(2**11)
    login = await client.post("/api/auth/login", json={"email": body["email"], "password": body["password"]})
    assert login.status == 200, await login.text()
    wrong = await client.post("/api/auth/login", json={"email": body["email"], "password": "not the one"})
    assert wrong.status == 401
