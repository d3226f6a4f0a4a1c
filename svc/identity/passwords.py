"""Password hashing with scrypt (from `cryptography`). Hashes never leave the store."""

from __future__ import annotations

import base64
import functools
import secrets

from cryptography.exceptions import InvalidKey
from cryptography.hazmat.primitives.kdf.scrypt import Scrypt

# N = 2**14, r=8, p=1: the interactive-login parameters the scrypt paper recommends. The cost
# (log2 N) is a setting (SVC_PASSWORD_COST); each hash records its own parameters, so hashes made
# under another cost still verify.
COST, R, P, LENGTH = 14, 8, 1, 32


def hash_password(password: str, cost: int = COST) -> str:
    """`scrypt$n$r$p$salt$hash`, both in base64; a fresh 16-byte salt each time."""
    salt = secrets.token_bytes(16)
    n = 2**cost
    derived = Scrypt(salt=salt, length=LENGTH, n=n, r=R, p=P).derive(password.encode())
    return "$".join(["scrypt", str(n), str(R), str(P), _b64(salt), _b64(derived)])


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
def dummy_hash(cost: int = COST) -> str:
    """Verified against when the email is unknown, so both failures take the same time (made with
    the cost new hashes get). Made on first use, not at import: a scrypt hash costs about 0.14 s
    of CPU, and every process that imports the identity package (each install actor) would pay it
    for nothing."""
    return hash_password(secrets.token_hex(16), cost)
