"""Parsers of the settings' raw strings: each turns one variable's text into a typed value or
raises `SettingsError` with a one-line message naming the accepted form (config/settings.py)."""

from __future__ import annotations

import ipaddress
from collections.abc import Callable
from pathlib import Path
from urllib.parse import urlsplit

from croniter import croniter
from pydantic import BaseModel, ConfigDict

from config import catalogue

IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network


class SettingsError(ValueError):
    """A setting that cannot be used; the message is one line naming the variable."""


class AppKey(BaseModel):
    """One application API key from APP_API_KEYS, optionally scoped to an install."""

    model_config = ConfigDict(frozen=True)

    key: str
    install_id: str | None = None


def parse_directory(raw: str) -> Path:
    """A directory path made absolute once, at start-up (it may not exist yet; a file is refused)."""
    path = Path(raw).expanduser().absolute()
    if path.exists() and not path.is_dir():
        raise ValueError("names a file, not a directory")
    return path


def whole_number(low: int, high: int | None = None) -> Callable[[str], int]:
    """A parser of a whole number from `low` (to `high`, when given)."""

    def parse(raw: str) -> int:
        try:
            number = int(raw)
        except ValueError:
            raise ValueError("not a whole number") from None
        if number < low:
            raise ValueError(f"below {low}")
        if high is not None and number > high:
            raise ValueError(f"above {high}")
        return number

    return parse


def parse_token(raw: str) -> str:
    """A key, token or id: printable, no space inside (a value pasted with a line break in it)."""
    if any(char.isspace() or not char.isprintable() for char in raw):
        raise ValueError("contains a space or a control character")
    return raw


def parse_ray_address(raw: str) -> str:
    """`auto` (the cluster this machine belongs to), `host:port` (a GCS) or `ray://host[:port]`."""
    if raw == "auto":
        return raw
    parts = urlsplit(raw if "://" in raw else f"gcs://{raw}")
    if parts.scheme not in {"gcs", "ray"} or not parts.hostname or parts.path not in {"", "/"}:
        raise ValueError("not auto, host:port or ray://host:port")
    try:
        port = parts.port
    except ValueError:
        raise ValueError("the port is not a number from 1 to 65535") from None
    if parts.scheme == "gcs" and port is None:
        raise ValueError("a GCS address needs its port (host:6379)")
    return raw


def positive_seconds(raw: str) -> float:
    """A positive number of seconds."""
    try:
        seconds = float(raw)
    except ValueError:
        raise ValueError("not a number") from None
    if not seconds > 0:
        raise ValueError("must be positive")
    return seconds


def parse_seconds(name: str, raw: str | None, default: float) -> float:
    """A positive number of seconds, or the default when unset; the error names the variable."""
    if raw is None or not raw.strip():
        return default
    try:
        return positive_seconds(raw)
    except ValueError as exc:
        raise SettingsError(f"{name}={raw!r}: {exc}; accepted: a positive number of seconds") from None


def parse_rate_limits(raw: str | None) -> float | None:
    """`on` (default) is 1.0, `off` is None, a positive number is a multiplier."""
    if raw is None or raw.lower() == "on":
        return 1.0
    if raw.lower() == "off":
        return None
    try:
        multiplier = float(raw)
    except ValueError:
        raise ValueError("neither on, off nor a number") from None
    if not multiplier > 0:
        raise ValueError("the multiplier must be positive")
    return multiplier


def parse_networks(raw: str | None) -> tuple[IPNetwork, ...]:
    """Comma-separated CIDRs (a bare address is a /32 or /128)."""
    if not raw:
        return ()
    networks = []
    for part in raw.split(","):
        if part.strip():
            try:
                networks.append(ipaddress.ip_network(part.strip(), strict=False))
            except ValueError:
                raise ValueError(f"{part.strip()!r} is not an address or CIDR") from None
    return tuple(networks)


def parse_bool(raw: str | None) -> bool:
    """`1`, `true`, `yes`, `on` (any case) are true; anything else is false."""
    return (raw or "").lower() in {"1", "true", "yes", "on"}


def parse_strict_bool(raw: str) -> bool:
    """A yes/no value; anything unrecognised is refused rather than read as false."""
    if raw.lower() in {"1", "true", "yes", "on"}:
        return True
    if raw.lower() in {"0", "false", "no", "off"}:
        return False
    raise ValueError("not a yes/no value")


def parse_on_off(raw: str) -> bool:
    """`on` or `off` (any case)."""
    if raw.lower() in {"on", "off"}:
        return raw.lower() == "on"
    raise ValueError("neither on nor off")


def parse_names(raw: str) -> tuple[str, ...]:
    """Comma-separated names, blanks dropped."""
    return tuple(name.strip() for name in raw.split(",") if name.strip())


def parse_http_url(raw: str) -> str:
    """An absolute http(s) URL, without a trailing slash."""
    parts = urlsplit(raw)
    if parts.scheme not in {"http", "https"} or not parts.netloc:
        raise ValueError("not an absolute http:// or https:// URL")
    return raw.rstrip("/")


def parse_mongodb_uri(raw: str) -> str:
    """A MongoDB connection string with at least one host (an SRV name is resolved at connect)."""
    parts = urlsplit(raw)
    if parts.scheme not in {"mongodb", "mongodb+srv"}:
        raise ValueError("not a mongodb:// or mongodb+srv:// URI")
    hosts = parts.netloc.rpartition("@")[2]
    if not hosts or any(not host for host in hosts.split(",")):
        raise ValueError("no host in it")
    return raw


def parse_smtp_url(raw: str) -> str:
    """`smtp://`, `smtp+starttls://` or `smtps://` with a host; the port defaults to 587 or 465."""
    parts = urlsplit(raw)
    if parts.scheme not in {"smtp", "smtp+starttls", "smtps"} or not parts.hostname:
        raise ValueError("not an smtp:// or smtps:// URL with a host")
    try:
        parts.port  # noqa: B018 - raises ValueError on a port out of range
    except ValueError:
        raise ValueError("the port is not a number from 1 to 65535") from None
    return raw


def parse_sender(raw: str) -> str:
    """An address with an `@`, optionally `Name <address>`."""
    from email.utils import parseaddr

    _, address = parseaddr(raw)
    if "@" not in address or address.startswith("@") or address.endswith("@"):
        raise ValueError("no email address in it")
    return raw


def parse_fernet_keys(raw: str) -> tuple[str, ...]:
    """Comma-separated Fernet keys, each checked (the vault would refuse them later anyway)."""
    from cryptography.fernet import Fernet

    keys = tuple(key.strip() for key in raw.split(",") if key.strip())
    for number, key in enumerate(keys, 1):
        try:
            Fernet(key.encode())
        except (ValueError, TypeError):
            raise ValueError(f"key {number} is not a Fernet key") from None
    return keys


def parse_model_id(raw: str) -> str:
    """A catalogue model id that has an upstream name."""
    if raw not in catalogue.DEFAULT_UPSTREAM:
        raise ValueError("not a catalogue model id")
    return raw


# A whole number of cents, at least 50 (the provider's minimum charge).
parse_price_cents = whole_number(50)


def parse_cron(raw: str) -> str:
    """A 5-field cron expression."""
    if len(raw.split()) != 5 or not croniter.is_valid(raw):
        raise ValueError("not a 5-field cron expression")
    return raw


def parse_app_keys(raw: str | None) -> tuple[AppKey, ...]:
    """`<installId>:<key>` pairs or bare `<key>`s, comma separated."""
    if not raw:
        return ()
    keys = []
    for entry in raw.split(","):
        entry = entry.strip()
        if not entry:
            continue
        install_id, sep, key = entry.partition(":")
        if sep and not (install_id and key):
            raise ValueError("an entry has an empty install id or key")
        keys.append(AppKey(key=key, install_id=install_id) if sep else AppKey(key=install_id))
    return tuple(keys)
