"""The secret vault primitive: Fernet encryption with key rotation.

New values are encrypted with the first key of SVC_SECRET_KEYS; every listed key
decrypts, so a key can be rotated in by putting it first and retired once
`svc keys rotate` (svc/core/rekey.py, with `Vault.rotate`) has re-encrypted what the
old key wrote.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Sequence
from pathlib import Path

from cryptography.fernet import Fernet, InvalidToken, MultiFernet

log = logging.getLogger(__name__)

DEV_KEY_FILE = "secret.key"


class VaultError(Exception):
    """A stored value could not be decrypted with any configured key."""


class Vault:
    """Encrypts and decrypts short strings (keys, secrets, credentials)."""

    def __init__(self, keys: Sequence[str]) -> None:
        if not keys:
            raise ValueError("the vault needs at least one Fernet key")
        self.keys = list(keys)
        self._fernets = [Fernet(key.encode()) for key in keys]
        self._fernet = MultiFernet(self._fernets)

    @classmethod
    def from_settings(cls, keys: Sequence[str], data_dir: Path) -> Vault:
        """Use SVC_SECRET_KEYS, or a development key generated once into the data directory."""
        if keys:
            return cls(keys)
        return cls([load_dev_key(data_dir)])

    def encrypt(self, plaintext: str) -> str:
        """A Fernet token (URL-safe text) for the value."""
        return self._fernet.encrypt(plaintext.encode()).decode()

    def decrypt(self, token: str) -> str:
        """The value behind a token written with any configured key."""
        try:
            return self._fernet.decrypt(token.encode()).decode()
        except InvalidToken:
            raise VaultError("stored secret cannot be decrypted with the configured keys") from None

    def is_current(self, token: str) -> bool:
        """Whether the newest key alone decrypts the token (it needs no re-encryption)."""
        try:
            self._fernets[0].decrypt(token.encode())
        except InvalidToken:
            return False
        return True

    def can_decrypt(self, token: str) -> bool:
        """Whether any configured key decrypts the token."""
        try:
            self._fernet.decrypt(token.encode())
        except InvalidToken:
            return False
        return True

    def rotate(self, token: str) -> str:
        """Re-encrypt a token with the current (first) key."""
        try:
            return self._fernet.rotate(token.encode()).decode()
        except InvalidToken:
            raise VaultError("stored secret cannot be decrypted with the configured keys") from None


def load_dev_key(data_dir: Path) -> str:
    """Read, or create once (mode 0600), the development key under the data directory."""
    path = data_dir / DEV_KEY_FILE
    if path.exists():
        return path.read_text().strip()
    data_dir.mkdir(parents=True, exist_ok=True)
    key = Fernet.generate_key().decode()
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:  # another process created it first
        return path.read_text().strip()
    with os.fdopen(fd, "w") as handle:
        handle.write(key + "\n")
    log.warning(
        "SVC_SECRET_KEYS is not set: generated a development key at %s. "
        "Set SVC_SECRET_KEYS in production; losing this file loses every stored secret.",
        path,
    )
    return key
