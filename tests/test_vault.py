"""The secret vault primitive: Fernet with rotation, and a development key made once."""

from __future__ import annotations

import stat

import pytest
from cryptography.fernet import Fernet

from svc.core.vault import DEV_KEY_FILE, Vault, VaultError


def test_round_trip_and_ciphertext_hides_the_value():
    vault = Vault([Fernet.generate_key().decode()])
    token = vault.encrypt("sk-very-secret")
    assert "sk-very-secret" not in token
    assert vault.decrypt(token) == "sk-very-secret"


def test_rotation_new_key_first_old_keys_still_decrypt():
    old, new = Fernet.generate_key().decode(), Fernet.generate_key().decode()
    written_before = Vault([old]).encrypt("value")
    rotated_vault = Vault([new, old])
    assert rotated_vault.decrypt(written_before) == "value"
    written_after = rotated_vault.encrypt("value")
    assert Vault([new]).decrypt(written_after) == "value", "new writes use the first key"
    with pytest.raises(VaultError):
        Vault([new]).decrypt(written_before)
    assert Vault([new]).decrypt(rotated_vault.rotate(written_before)) == "value"


def test_wrong_key_is_a_clear_error():
    token = Vault([Fernet.generate_key().decode()]).encrypt("x")
    with pytest.raises(VaultError, match="cannot be decrypted"):
        Vault([Fernet.generate_key().decode()]).decrypt(token)


def test_dev_key_is_generated_once_private_and_reused(tmp_path, caplog):
    first = Vault.from_settings((), tmp_path)
    path = tmp_path / DEV_KEY_FILE
    assert path.exists()
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert any("SVC_SECRET_KEYS is not set" in r.getMessage() for r in caplog.records)
    token = first.encrypt("kept")
    assert Vault.from_settings((), tmp_path).decrypt(token) == "kept"


def test_configured_keys_win_over_the_dev_key(tmp_path):
    key = Fernet.generate_key().decode()
    vault = Vault.from_settings((key,), tmp_path)
    assert not (tmp_path / DEV_KEY_FILE).exists()
    assert Vault([key]).decrypt(vault.encrypt("v")) == "v"
