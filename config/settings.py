"""One pydantic model for every setting, read from the environment.

Every variable is optional; the defaults give a working local service (embedded
database, local Ray). The table in docs/settings.md mirrors this module.
"""

from __future__ import annotations

import ipaddress
import os
from collections.abc import Mapping
from pathlib import Path
from urllib.parse import urlsplit

from croniter import croniter
from pydantic import BaseModel, ConfigDict, Field, field_validator

IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network


class AppKey(BaseModel):
    """One application API key from APP_API_KEYS, optionally scoped to an install."""

    model_config = ConfigDict(frozen=True)

    key: str
    install_id: str | None = None


class ProviderSettings(BaseModel):
    """Credentials and endpoint of one LLM provider."""

    model_config = ConfigDict(frozen=True)

    api_key: str | None = None
    base_url: str | None = None


class Settings(BaseModel):
    """The service's configuration. Build it with `Settings.from_env()`."""

    model_config = ConfigDict(frozen=True)

    mongodb_uri: str | None = None
    data_dir: Path = Path("./.svc-data")
    ray_address: str | None = None
    secret_keys: tuple[str, ...] = ()
    public_url: str = "http://127.0.0.1:8080"
    providers: dict[str, ProviderSettings] = Field(default_factory=dict)
    judge_model: str = "providerA:small"
    # None means rate limiting is off; otherwise the spec's limits are multiplied by it.
    rate_limit_multiplier: float | None = 1.0
    trusted_proxies: tuple[IPNetwork, ...] = ()
    egress_allow_private: bool = False
    stripe_api_key: str | None = None
    stripe_api_base: str | None = None
    stripe_webhook_secret: str | None = None
    # The org Pro plan: a provider price id, or (unset) a monthly price of pro_price_cents.
    stripe_pro_price_id: str | None = None
    pro_price_cents: int = Field(default=4900, ge=50)
    smtp_url: str | None = None
    app_api_keys: tuple[AppKey, ...] = ()
    billing_cron_schedule: str = "0 0 1 * *"
    max_body_bytes: int = 2 * 1024 * 1024
    disabled_plugins: tuple[str, ...] = ()
    actor_idle_seconds: float = 300.0
    scheduler_enabled: bool = True
    # How often the run poller asks pull-only platforms (orchB) for finished runs (spec: 5 minutes).
    run_poll_seconds: float = Field(default=300.0, gt=0)
    # How long `svc serve` lets in-flight requests end on SIGTERM/SIGINT before cutting them.
    shutdown_grace_seconds: float = Field(default=5.0, gt=0)

    @field_validator("billing_cron_schedule")
    @classmethod
    def _cron(cls, value: str) -> str:
        if not croniter.is_valid(value) or len(value.split()) != 5:
            raise ValueError(f"BILLING_CRON_SCHEDULE is not a 5-field cron expression: {value!r}")
        return value

    @property
    def cookie_secure(self) -> bool:
        """Session cookies are marked Secure when the public origin is https."""
        return urlsplit(self.public_url).scheme == "https"

    @property
    def public_origin(self) -> str:
        """Scheme and authority of the public URL, as browsers send in `Origin`."""
        parts = urlsplit(self.public_url)
        return f"{parts.scheme}://{parts.netloc}"

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None, **overrides: object) -> Settings:
        """Read the SVC_* variables (and the spec's APP_API_KEYS, BILLING_CRON_SCHEDULE)."""
        env = os.environ if env is None else env

        def get(name: str) -> str | None:
            value = env.get(name, "").strip()
            return value or None

        values: dict[str, object] = {
            "mongodb_uri": get("SVC_MONGODB_URI"),
            "data_dir": Path(get("SVC_DATA_DIR") or "./.svc-data"),
            "ray_address": get("SVC_RAY_ADDRESS"),
            "secret_keys": tuple(k.strip() for k in (get("SVC_SECRET_KEYS") or "").split(",") if k.strip()),
            "public_url": (get("SVC_PUBLIC_URL") or "http://127.0.0.1:8080").rstrip("/"),
            "providers": {
                name: ProviderSettings(
                    api_key=get(f"SVC_PROVIDER{name[-1]}_API_KEY"),
                    base_url=get(f"SVC_PROVIDER{name[-1]}_BASE_URL"),
                )
                for name in ("providerA", "providerB", "providerC")
            },
            "judge_model": get("SVC_JUDGE_MODEL") or "providerA:small",
            "rate_limit_multiplier": parse_rate_limits(get("SVC_RATE_LIMITS")),
            "trusted_proxies": parse_networks(get("SVC_TRUSTED_PROXIES")),
            "egress_allow_private": parse_bool(get("SVC_EGRESS_ALLOW_PRIVATE")),
            "stripe_api_key": get("SVC_STRIPE_API_KEY"),
            "stripe_api_base": get("SVC_STRIPE_API_BASE"),
            "stripe_webhook_secret": get("SVC_STRIPE_WEBHOOK_SECRET"),
            "stripe_pro_price_id": get("SVC_STRIPE_PRO_PRICE_ID"),
            "pro_price_cents": int(get("SVC_PRO_PRICE_CENTS") or 4900),
            "smtp_url": get("SVC_SMTP_URL"),
            "app_api_keys": parse_app_keys(get("APP_API_KEYS")),
            "billing_cron_schedule": get("BILLING_CRON_SCHEDULE") or "0 0 1 * *",
            "actor_idle_seconds": float(get("SVC_ACTOR_IDLE_SECONDS") or 300),
            "scheduler_enabled": (get("SVC_SCHEDULER") or "on").lower() != "off",
            "run_poll_seconds": parse_seconds("SVC_RUN_POLL_SECONDS", get("SVC_RUN_POLL_SECONDS"), 300.0),
            "shutdown_grace_seconds": parse_seconds(
                "SVC_SHUTDOWN_GRACE_SECONDS", get("SVC_SHUTDOWN_GRACE_SECONDS"), 5.0
            ),
            "disabled_plugins": tuple(
                name.strip() for name in (get("SVC_DISABLED_PLUGINS") or "").split(",") if name.strip()
            ),
        }
        values.update(overrides)
        return cls.model_validate(values)


def parse_seconds(name: str, raw: str | None, default: float) -> float:
    """A positive number of seconds, or the default when unset; the error names the variable."""
    if raw is None or not raw.strip():
        return default
    try:
        seconds = float(raw)
    except ValueError:
        raise ValueError(f"{name} must be a positive number of seconds, not {raw!r}") from None
    if not seconds > 0:
        raise ValueError(f"{name} must be a positive number of seconds, not {raw!r}")
    return seconds


def parse_rate_limits(raw: str | None) -> float | None:
    """`on` (default) is 1.0, `off` is None, a positive number is a multiplier."""
    if raw is None or raw.lower() == "on":
        return 1.0
    if raw.lower() == "off":
        return None
    try:
        multiplier = float(raw)
    except ValueError:
        raise ValueError(f"SVC_RATE_LIMITS must be on, off or a positive number, not {raw!r}") from None
    if multiplier <= 0:
        raise ValueError("SVC_RATE_LIMITS multiplier must be positive")
    return multiplier


def parse_networks(raw: str | None) -> tuple[IPNetwork, ...]:
    """Comma-separated CIDRs (a bare address is a /32 or /128)."""
    if not raw:
        return ()
    return tuple(ipaddress.ip_network(part.strip(), strict=False) for part in raw.split(",") if part.strip())


def parse_bool(raw: str | None) -> bool:
    """`1`, `true`, `yes`, `on` (any case) are true; anything else is false."""
    return (raw or "").lower() in {"1", "true", "yes", "on"}


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
        keys.append(AppKey(key=key, install_id=install_id) if sep else AppKey(key=install_id))
    return tuple(keys)
