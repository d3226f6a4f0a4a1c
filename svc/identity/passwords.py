"""Password hashing with scrypt (from `cryptography`). Hashes never leave the store."""

from __future__ import annotations

import base64
import functools
import secrets

from cryptography.exceptions import InvalidKey
from cryptography.hazmat.primitives.kdf.scrypt import Scrypt

# 2**14 iterations, r=8, p=1: the interactive-login parameters the scrypt paper recommends.
N, R, P, LENGTH = 2**14, 8, 1, 32


def hash_password(password: str) -> str:
    """`scrypt$n$r$p$salt$hash`, both in base64; a fresh 16-byte salt each time."""
    salt = secrets.token_bytes(16)
    derived = Scrypt(salt=salt, length=LENGTH, n=N, r=R, p=P).derive(password.encode())
    return "$".join(["scrypt", str(N), str(R), str(P), _b64(salt), _b64(derived)])


def verify_password(password: str, encoded: str) -> bool:
    """Constant-time check of a password against `hash_password`'s output."""
    try:
        scheme, n, r, p, salt, expected = encoded.split("$")
        if scheme != "scrypt":
            return False
        kdf = Scrypt(salt=_unb64(salt), length=LENGTH, n=int(n), r=int(r), p=int(p))
        kdf.verify(password.encode(), _unb64(expected))
    except (InvalidKey, ValueError):
        return False
    return True


def _b64(raw: bytes) -> str:
    return base64.b64encode(raw).decode()


def _unb64(text: str) -> bytes:
    return base64.b64decode(text.encode())


@functools.cache
def dummy_hash() -> str:
    """Verified against when the email is unknown, so both failures take the same time. Made on
    first use, not at import: a scrypt hash costs about 0.1 s of CPU, and every process that
    imports the identity package (each install actor) would pay it for nothing."""
    return hash_password(secrets.token_hex(16))
