"""One pydantic model for every setting, read from the environment and a `.env` file.

Every variable is optional; the defaults give a working local service (embedded
database, local Ray). `Environment` (pydantic-settings) reads the raw strings
from the process environment and `.env`; `Settings.from_env` turns each into a
typed value. A value that cannot be used raises `SettingsError`, whose one line
names the variable, what is wrong and the accepted form, so start-up can stop
without a traceback (`settings_or_exit`). The table in docs/settings.md lists
every variable (`VARIABLES` below); a test keeps the two in step.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NoReturn
from urllib.parse import urlsplit

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from config import catalogue
from config import tracing as trace_config
from config.mcp_catalogue import McpCatalogueEntry, McpServersFileError, load_mcp_servers_file
from config.parsing import (
    AppKey,
    IPNetwork,
    SettingsError,
    parse_app_keys,
    parse_cron,
    parse_directory,
    parse_fernet_keys,
    parse_http_url,
    parse_model_id,
    parse_mongodb_uri,
    parse_names,
    parse_networks,
    parse_on_off,
    parse_price_cents,
    parse_rate_limits,
    parse_ray_address,
    parse_sender,
    parse_smtp_url,
    parse_strict_bool,
    parse_token,
    positive_seconds,
    whole_number,
)
from config.tracing import TraceSettings

ENV_FILE_VARIABLE = "SVC_ENV_FILE"
SECRETS_DIR_VARIABLE = "SVC_SECRETS_DIR"
DEFAULT_SENDER = "svc <no-reply@localhost>"


@dataclass(frozen=True)
class Variable:
    """One environment variable: what it means and the form it accepts (docs/settings.md)."""

    name: str
    accepted: str


# Every variable the service reads, in the order of docs/settings.md.
VARIABLES: tuple[Variable, ...] = (
    Variable("SVC_ENV_FILE", "a path to a dotenv file (default `.env` in the current directory)"),
    Variable(
        "SVC_SECRETS_DIR",
        "a directory with one file per variable, named after it (a mounted Kubernetes Secret)",
    ),
    Variable("SVC_MONGODB_URI", "a mongodb:// or mongodb+srv:// connection string"),
    Variable("SVC_DB_TIMEOUT_SECONDS", "a positive number of seconds"),
    Variable("SVC_DATA_DIR", "a directory path (relative paths are taken from the current directory)"),
    Variable("SVC_EMBEDDED_DB_SYNC", "`true` or `false` (also 1/0, yes/no, on/off)"),
    Variable("SVC_RAY_ADDRESS", "`auto`, `host:port` or `ray://host:10001`"),
    Variable("SVC_SECRET_KEYS", "comma-separated Fernet keys (32 url-safe base64 bytes), newest first"),
    Variable("SVC_PUBLIC_URL", "an http:// or https:// origin, e.g. https://svc.example.com"),
    *(
        Variable(f"SVC_PROVIDER{letter}_{suffix}", form)
        for letter in "ABC"
        for suffix, form in (("API_KEY", "the provider's API key"), ("BASE_URL", "an http(s) URL"))
    ),
    Variable(
        "SVC_MODELS_FILE", "a JSON or TOML file of `upstream`, `bedrock` and `orchA` names (docs/models.md)"
    ),
    Variable("SVC_JUDGE_MODEL", "a catalogue model id such as `providerA:small`"),
    Variable("SVC_MCP_SERVERS_FILE", "a JSON or TOML file with a `servers` table (docs/mcp.md)"),
    Variable("SVC_RATE_LIMITS", "`on`, `off` or a positive multiplier such as `10`"),
    Variable("SVC_TRUSTED_PROXIES", "comma-separated CIDRs or addresses, e.g. `10.0.0.0/8,192.0.2.1`"),
    Variable("SVC_EGRESS_ALLOW_PRIVATE", "`true` or `false` (also 1/0, yes/no, on/off)"),
    Variable("SVC_STRIPE_API_KEY", "a Stripe secret key"),
    Variable("SVC_STRIPE_API_BASE", "an http(s) URL"),
    Variable("SVC_STRIPE_WEBHOOK_SECRET", "the webhook endpoint's signing secret"),
    Variable("SVC_STRIPE_PRO_PRICE_ID", "a Stripe price id"),
    Variable("SVC_PRO_PRICE_CENTS", "a whole number of cents, at least 50"),
    Variable(
        "SVC_SMTP_URL",
        "`smtp://user:pass@host:587` (STARTTLS when offered), `smtp+starttls://` (STARTTLS required) "
        "or `smtps://user:pass@host:465` (implicit TLS); `?cafile=/path/ca.pem` for a private CA",
    ),
    Variable("SVC_MAIL_FROM", "an address, optionally with a name: `svc <no-reply@example.com>`"),
    Variable(
        "SVC_METRICS_TOKEN",
        "a token without spaces; GET /metrics then needs `Authorization: Bearer <token>` "
        "(required off loopback)",
    ),
    Variable("APP_API_KEYS", "comma-separated `<installId>:<key>` pairs or bare `<key>`s"),
    Variable("BILLING_CRON_SCHEDULE", "a 5-field cron expression (UTC), e.g. `0 0 1 * *`"),
    Variable("SVC_ACTOR_IDLE_SECONDS", "a positive number of seconds"),
    Variable("SVC_ACTOR_MEMORY_MB", "a whole number of megabytes, at least 32"),
    Variable("SVC_ACTOR_PLACEMENT_SECONDS", "a positive number of seconds"),
    Variable("SVC_SCHEDULER", "`on` or `off`"),
    Variable("SVC_RUN_POLL_SECONDS", "a positive number of seconds"),
    Variable("SVC_RUN_HANDOFF_SECONDS", "a positive number of seconds"),
    Variable("SVC_SHUTDOWN_GRACE_SECONDS", "a positive number of seconds"),
    Variable("SVC_CALLBACK_MAX_ATTEMPTS", "a whole number from 1 to 1000"),
    Variable("SVC_RUN_WAIT_SECONDS", "a positive number of seconds"),
    Variable("SVC_ACTOR_MAX_RUNS", "a whole number from 1 to 1000"),
    Variable("SVC_EVAL_MONTHLY_RUNS", "a whole number from 0 to 1000000"),
    Variable("SVC_EVAL_CONCURRENCY", "a whole number from 1 to 64"),
    Variable("SVC_ACTOR_SPARES", "a whole number from 0 to 100"),
    Variable("SVC_PASSWORD_COST", "a whole number from 10 to 20 (log2 of scrypt's N)"),
    Variable("SVC_RUN_MAX_RESUMES", "a whole number from 0 to 100"),
    Variable("SVC_RUN_STALL_SECONDS", "a positive number of seconds"),
    Variable("SVC_CRASH_POINTS", "a test hook: comma-separated crash points of a run's end; leave unset"),
    Variable("SVC_DISABLED_PLUGINS", "comma-separated plugin names"),
    Variable("SVC_ORCHB_BASE_URL", "an http(s) URL (read by the orchB driver at call time)"),
    Variable("SVC_ORCHC_ENDPOINT_URL", "an http(s) URL (read by the orchC driver at call time)"),
    *(Variable(name, accepted) for name, accepted in trace_config.VARIABLES),
)
ACCEPTED = {variable.name: variable.accepted for variable in VARIABLES}
# Read from the process environment by the platform drivers at call time: a value from `.env`
# is exported to the environment so that the file can set them too.
EXPORTED = ("SVC_ORCHB_BASE_URL", "SVC_ORCHC_ENDPOINT_URL")
# Variables whose values are secrets (or carry one): never echoed in an error, never published
# where the Ray cluster can read them (actors/deployment.py reads them on each node).
SECRET_VARIABLES = frozenset(
    {
        "SVC_MONGODB_URI",
        "SVC_SECRET_KEYS",
        "SVC_STRIPE_API_KEY",
        "SVC_STRIPE_WEBHOOK_SECRET",
        "SVC_SMTP_URL",
        "SVC_METRICS_TOKEN",
        "APP_API_KEYS",
        *(f"SVC_PROVIDER{letter}_API_KEY" for letter in "ABC"),
        # The trace collector's credentials travel in the export headers (tracing, #33).
        *trace_config.SECRET,
    }
)
# Secret URLs: an error shows them with the password masked.
SECRET_URLS = frozenset({"SVC_MONGODB_URI", "SVC_SMTP_URL", *trace_config.URLS})
# Fields whose variable is not `SVC_<FIELD>` (the rest are; `variable_of`).
FIELD_VARIABLES = {
    "billing_cron_schedule": "BILLING_CRON_SCHEDULE",
    "app_api_keys": "APP_API_KEYS",
    "rate_limit_multiplier": "SVC_RATE_LIMITS",
    "scheduler_enabled": "SVC_SCHEDULER",
}


def variable_of(field: str) -> str | None:
    """The environment variable a settings field is read from (None for an internal field)."""
    name = FIELD_VARIABLES.get(field, f"SVC_{field.upper()}")
    return name if name in ACCEPTED else None


class ProviderSettings(BaseModel):
    """Credentials and endpoint of one LLM provider."""

    model_config = ConfigDict(frozen=True)

    api_key: str | None = None
    base_url: str | None = None


class Environment(BaseSettings):
    """Every variable's raw string, from the environment (which wins) and the dotenv file; unknown ignored."""

    model_config = SettingsConfigDict(extra="allow", case_sensitive=True, env_ignore_empty=True)

    @classmethod
    def read(cls, env_file: str | None = None) -> dict[str, str]:
        """Every known variable that is set, as a string: the environment wins over a file in
        SVC_SECRETS_DIR, which wins over the dotenv file."""
        named = env_file or os.environ.get(ENV_FILE_VARIABLE, "").strip() or None
        path = named or ".env"
        if named is not None:
            if not Path(path).is_file():
                accepted = ACCEPTED[ENV_FILE_VARIABLE]
                raise SettingsError(f"{ENV_FILE_VARIABLE}={path}: no such file; accepted: {accepted}")
        from_file = cls(_env_file=path if Path(path).is_file() else None)  # type: ignore[call-arg]
        values = {name: str(value) for name, value in (from_file.model_extra or {}).items()}
        known = {variable.name for variable in VARIABLES}
        found = {name: value for name, value in values.items() if name in known}
        found.update(secret_files(os.environ.get(SECRETS_DIR_VARIABLE) or found.get(SECRETS_DIR_VARIABLE)))
        for name in known:
            if os.environ.get(name, "").strip():
                found[name] = os.environ[name]
        for name in EXPORTED:
            if name in found and not os.environ.get(name):
                os.environ[name] = found[name]
        return found


def secret_files(directory: str | None) -> dict[str, str]:
    """The variables a secrets directory holds: a file named after each (trailing newline cut)."""
    if not directory or not directory.strip():
        return {}
    path = Path(directory.strip())
    if not path.is_dir():
        accepted = ACCEPTED[SECRETS_DIR_VARIABLE]
        raise SettingsError(f"{SECRETS_DIR_VARIABLE}={directory}: no such directory; accepted: {accepted}")
    found = {}
    for variable in VARIABLES:
        candidate = path / variable.name
        if candidate.is_file():
            value = candidate.read_text().rstrip("\r\n")
            if value.strip():
                found[variable.name] = value
    return found


def _default_data_dir() -> Path:
    """`<checkout>/.svc-data` from a checkout, else XDG data: absolute, one database from any cwd."""
    root = Path(__file__).resolve().parent.parent
    if (root / "pyproject.toml").is_file():
        return root / ".svc-data"
    base = os.environ.get("XDG_DATA_HOME") or str(Path.home() / ".local" / "share")
    return Path(base) / "svc"


DEFAULT_DATA_DIR = _default_data_dir()


class Settings(BaseModel):
    """The service's configuration. Build it with `Settings.from_env()`."""

    model_config = ConfigDict(frozen=True)

    mongodb_uri: str | None = None
    # The bound on every database operation: past it the operation fails (503 at the API).
    db_timeout_seconds: float = Field(default=10.0, gt=0)
    data_dir: Path = DEFAULT_DATA_DIR
    # The embedded database puts every commit on disk before acknowledging it (docs/storage.md).
    embedded_db_sync: bool = True
    ray_address: str | None = None
    secret_keys: tuple[str, ...] = ()
    # SVC_PUBLIC_URL, the one origin browsers use; None when unset: the dashboard then accepts
    # the address it is opened on (api/origins.py) and links start at `local_url`.
    public_url: str | None = None
    # Where this process serves when SVC_PUBLIC_URL is unset (`svc serve` sets it to the address
    # it listens on), so a mailed link reaches the service that sent it.
    local_url: str = "http://127.0.0.1:8080"
    providers: dict[str, ProviderSettings] = Field(default_factory=dict)
    # The upstream model name behind each catalogue id, and the Bedrock id orchC provisions with.
    models_file: Path | None = None
    upstream_models: dict[str, str] = Field(default_factory=lambda: dict(catalogue.DEFAULT_UPSTREAM))
    bedrock_models: dict[str, str] = Field(default_factory=lambda: dict(catalogue.DEFAULT_BEDROCK))
    orch_a_models: dict[str, str] = Field(default_factory=lambda: dict(catalogue.DEFAULT_ORCH_A))
    judge_model: str = "providerA:small"
    # The operator's MCP catalogue (docs/mcp.md): servers templates may name, never commands.
    mcp_servers_file: Path | None = None
    mcp_servers: dict[str, McpCatalogueEntry] = Field(default_factory=dict)
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
    mail_from: str = DEFAULT_SENDER
    metrics_token: str | None = None
    app_api_keys: tuple[AppKey, ...] = ()
    billing_cron_schedule: str = "0 0 1 * *"
    max_body_bytes: int = 2 * 1024 * 1024
    disabled_plugins: tuple[str, ...] = ()
    actor_idle_seconds: float = 300.0
    actor_memory_mb: int = Field(default=128, ge=32)  # docs/deploy.md, "Sizing"
    actor_placement_seconds: float = Field(default=60.0, gt=0)
    scheduler_enabled: bool = True
    # How often the run poller asks pull-only platforms (orchB) for finished runs (spec: 5 minutes).
    run_poll_seconds: float = Field(default=300.0, gt=0)
    run_handoff_seconds: float = Field(default=600.0, gt=0)
    # How long `svc serve` lets in-flight requests end on SIGTERM/SIGINT before cutting them.
    shutdown_grace_seconds: float = Field(default=5.0, gt=0)
    # How many times a webhook run's callback is tried (within 24 hours) before it is failed.
    callback_max_attempts: int = Field(default=30, ge=1, le=1000)
    # A synchronous run's caller waits this long at most, then gets the run's state (it goes on).
    run_wait_seconds: float = Field(default=300.0, gt=0)
    # Evals (docs/evals.md): eval runs (live cases) a builder may start per calendar month (UTC),
    # and cases of one suite run at once.
    eval_monthly_runs: int = Field(default=500, ge=0, le=1_000_000)
    eval_concurrency: int = Field(default=4, ge=1, le=64)
    # Runs an install's actor runs at once; more wait, queued, in order (docs/runtime.md).
    actor_max_runs: int = Field(default=16, ge=1, le=1000)
    # Install actors started ahead on each node, each adopting an install at its first run (the warm pool).
    actor_spares: int = Field(default=2, ge=0, le=100)
    # log2 of scrypt's N for new password hashes (a stored hash keeps its own); below 14 only for
    # test suites, where each sign-up would otherwise cost 0.14 s of CPU.
    password_cost: int = Field(default=14, ge=10, le=20)
    # How often a run is resumed after its actor died before it ends failed.
    run_max_resumes: int = Field(default=2, ge=0, le=100)
    # A running run with no step for this long is ended by the sweeper, whatever its actor.
    run_stall_seconds: float = Field(default=900.0, gt=0)
    # A test hook (svc/runtime/faults.py): points of a run's end where install actors die once.
    crash_points: frozenset[str] = frozenset()
    # Traces: the OTEL_* variables and SVC_TRACE_* (config/tracing.py); off without an endpoint.
    tracing: TraceSettings = Field(default_factory=TraceSettings)

    @field_validator("billing_cron_schedule")
    @classmethod
    def _cron(cls, value: str) -> str:
        return parse_cron(value)

    @property
    def base_url(self) -> str:
        """Where links the service hands out start (mails, webhook and return URLs)."""
        return self.public_url or self.local_url

    @property
    def cookie_secure(self) -> bool:
        """Session cookies are marked Secure when the public URL is https (unset: api/origins.py
        decides per request, from the scheme the request came in on)."""
        return urlsplit(self.base_url).scheme == "https"

    @property
    def public_origin(self) -> str | None:
        """Scheme and authority of SVC_PUBLIC_URL, as browsers send in `Origin`; None when unset."""
        if self.public_url is None:
            return None
        parts = urlsplit(self.public_url)
        return f"{parts.scheme}://{parts.netloc}"

    @property
    def configured_providers(self) -> frozenset[str]:
        """The LLM providers this server can call (an API key is set): an agent on another
        provider's model validates, but every run of it here fails."""
        return frozenset(name for name, provider in self.providers.items() if provider.api_key)

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None, **overrides: object) -> Settings:
        """Read the SVC_* variables (and the spec's APP_API_KEYS, BILLING_CRON_SCHEDULE): with `env`
        None, the process environment and the dotenv file; a given mapping alone (tests).
        Keyword arguments replace parsed values. Raises `SettingsError`."""
        raw: Mapping[str, str] = Environment.read() if env is None else env

        def get(name: str) -> str | None:
            value = (raw.get(name) or "").strip()
            return value or None

        def parsed(name: str, parse: Callable[[str], Any], default: Any) -> Any:
            value = get(name)
            if value is None:
                return default
            try:
                return parse(value)
            except (ValueError, TypeError) as exc:
                problem = str(exc) or "not a valid value"
                if isinstance(exc, catalogue.ModelsFileError | McpServersFileError):
                    raise SettingsError(f"{name}: {problem}") from None
                shown = _shown(name, value)
                raise SettingsError(f"{name}={shown}: {problem}; accepted: {ACCEPTED[name]}") from None

        models_file = parsed("SVC_MODELS_FILE", Path, None)
        names = (
            parsed("SVC_MODELS_FILE", lambda value: catalogue.load_models_file(Path(value)), None)
            if models_file is not None
            else {section: dict(defaults) for section, defaults in catalogue.DEFAULTS.items()}
        )
        values: dict[str, object] = {
            "mongodb_uri": parsed("SVC_MONGODB_URI", parse_mongodb_uri, None),
            "db_timeout_seconds": parsed("SVC_DB_TIMEOUT_SECONDS", positive_seconds, 10.0),
            "data_dir": parsed("SVC_DATA_DIR", parse_directory, DEFAULT_DATA_DIR),
            "embedded_db_sync": parsed("SVC_EMBEDDED_DB_SYNC", parse_strict_bool, True),
            "ray_address": parsed("SVC_RAY_ADDRESS", parse_ray_address, None),
            "secret_keys": parsed("SVC_SECRET_KEYS", parse_fernet_keys, ()),
            "public_url": parsed("SVC_PUBLIC_URL", parse_http_url, None),
            "providers": {
                name: ProviderSettings(
                    api_key=parsed(f"SVC_PROVIDER{name[-1]}_API_KEY", parse_token, None),
                    base_url=parsed(f"SVC_PROVIDER{name[-1]}_BASE_URL", parse_http_url, None),
                )
                for name in ("providerA", "providerB", "providerC")
            },
            "models_file": models_file,
            "upstream_models": names["upstream"],
            "bedrock_models": names["bedrock"],
            "orch_a_models": names["orchA"],
            "judge_model": parsed("SVC_JUDGE_MODEL", parse_model_id, "providerA:small"),
            "mcp_servers_file": parsed("SVC_MCP_SERVERS_FILE", Path, None),
            "mcp_servers": parsed(
                "SVC_MCP_SERVERS_FILE", lambda value: load_mcp_servers_file(Path(value)), {}
            ),
            "rate_limit_multiplier": parsed("SVC_RATE_LIMITS", parse_rate_limits, 1.0),
            "trusted_proxies": parsed("SVC_TRUSTED_PROXIES", parse_networks, ()),
            "egress_allow_private": parsed("SVC_EGRESS_ALLOW_PRIVATE", parse_strict_bool, False),
            "stripe_api_key": parsed("SVC_STRIPE_API_KEY", parse_token, None),
            "stripe_api_base": parsed("SVC_STRIPE_API_BASE", parse_http_url, None),
            "stripe_webhook_secret": parsed("SVC_STRIPE_WEBHOOK_SECRET", parse_token, None),
            "stripe_pro_price_id": parsed("SVC_STRIPE_PRO_PRICE_ID", parse_token, None),
            "pro_price_cents": parsed("SVC_PRO_PRICE_CENTS", parse_price_cents, 4900),
            "smtp_url": parsed("SVC_SMTP_URL", parse_smtp_url, None),
            "mail_from": parsed("SVC_MAIL_FROM", parse_sender, DEFAULT_SENDER),
            "metrics_token": parsed("SVC_METRICS_TOKEN", parse_token, None),
            "app_api_keys": parsed("APP_API_KEYS", parse_app_keys, ()),
            "billing_cron_schedule": parsed("BILLING_CRON_SCHEDULE", parse_cron, "0 0 1 * *"),
            "actor_idle_seconds": parsed("SVC_ACTOR_IDLE_SECONDS", positive_seconds, 300.0),
            "actor_memory_mb": parsed("SVC_ACTOR_MEMORY_MB", whole_number(32), 128),
            "actor_placement_seconds": parsed("SVC_ACTOR_PLACEMENT_SECONDS", positive_seconds, 60.0),
            "scheduler_enabled": parsed("SVC_SCHEDULER", parse_on_off, True),
            "run_poll_seconds": parsed("SVC_RUN_POLL_SECONDS", positive_seconds, 300.0),
            "run_handoff_seconds": parsed("SVC_RUN_HANDOFF_SECONDS", positive_seconds, 600.0),
            "shutdown_grace_seconds": parsed("SVC_SHUTDOWN_GRACE_SECONDS", positive_seconds, 5.0),
            "callback_max_attempts": parsed("SVC_CALLBACK_MAX_ATTEMPTS", whole_number(1, 1000), 30),
            "run_wait_seconds": parsed("SVC_RUN_WAIT_SECONDS", positive_seconds, 300.0),
            "actor_max_runs": parsed("SVC_ACTOR_MAX_RUNS", whole_number(1, 1000), 16),
            "eval_monthly_runs": parsed("SVC_EVAL_MONTHLY_RUNS", whole_number(0, 1_000_000), 500),
            "eval_concurrency": parsed("SVC_EVAL_CONCURRENCY", whole_number(1, 64), 4),
            "actor_spares": parsed("SVC_ACTOR_SPARES", whole_number(0, 100), 2),
            "password_cost": parsed("SVC_PASSWORD_COST", whole_number(10, 20), 14),
            "run_max_resumes": parsed("SVC_RUN_MAX_RESUMES", whole_number(0, 100), 2),
            "run_stall_seconds": parsed("SVC_RUN_STALL_SECONDS", positive_seconds, 900.0),
            "crash_points": frozenset(parsed("SVC_CRASH_POINTS", parse_names, ())),
            "disabled_plugins": parsed("SVC_DISABLED_PLUGINS", parse_names, ()),
        }
        for name in EXPORTED:
            parsed(name, parse_http_url, None)
        values["tracing"] = _trace_settings(get, parsed)
        values.update(overrides)
        try:
            return cls.model_validate(values)
        except ValidationError as exc:
            first = exc.errors()[0]
            field = ".".join(str(part) for part in first["loc"])
            variable = variable_of(field)
            if variable is None:
                raise SettingsError(f"setting {field}: {first['msg']}") from None
            shown = _shown(variable, str(first.get("input", "")))
            raise SettingsError(
                f"{variable}={shown}: {first['msg']}; accepted: {ACCEPTED[variable]}"
            ) from None


def _trace_settings(get: Callable[[str], str | None], parsed: Callable[..., Any]) -> TraceSettings:
    """The OTEL_* variables and SVC_TRACE_*: no endpoint (or OTEL_SDK_DISABLED) is tracing off."""
    parsed("OTEL_EXPORTER_OTLP_PROTOCOL", trace_config.parse_protocol, None)
    base = parsed("OTEL_EXPORTER_OTLP_ENDPOINT", trace_config.parse_endpoint, None)
    endpoint = parsed("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", trace_config.parse_endpoint, None)
    endpoint = endpoint or (trace_config.traces_url(base) if base else None)
    headers = dict(parsed("OTEL_EXPORTER_OTLP_HEADERS", trace_config.parse_pairs, ()))
    headers.update(parsed("OTEL_EXPORTER_OTLP_TRACES_HEADERS", trace_config.parse_pairs, ()))
    if parsed("OTEL_SDK_DISABLED", parse_strict_bool, False):
        endpoint = None
    return TraceSettings(
        endpoint=endpoint,
        headers=tuple(headers.items()),
        service_name=get("OTEL_SERVICE_NAME") or "svc",
        resource=parsed("OTEL_RESOURCE_ATTRIBUTES", trace_config.parse_pairs, ()),
        sampler=parsed("OTEL_TRACES_SAMPLER", trace_config.parse_sampler, "parentbased_always_on"),
        sampler_arg=parsed("OTEL_TRACES_SAMPLER_ARG", trace_config.parse_ratio, 1.0),
        capture_content=parsed("SVC_TRACE_CONTENT", parse_on_off, False),
        viewer_url=parsed("SVC_TRACE_URL", trace_config.parse_viewer_url, None),
    )


def settings_or_exit(env: Mapping[str, str] | None = None) -> Settings:
    """The settings, or one line on stderr and exit status 2 (start-up: no traceback)."""
    try:
        return Settings.from_env(env)
    except SettingsError as exc:
        _exit(f"error: {exc}")


def _exit(message: str) -> NoReturn:
    print(message, file=sys.stderr)
    raise SystemExit(2)


def _shown(name: str, value: str) -> str:
    """The value as an error may show it: never a secret."""
    if name in SECRET_VARIABLES and name not in SECRET_URLS:
        return "<hidden>"
    if name in SECRET_URLS:
        parts = urlsplit(value)
        if parts.password:
            return repr(value.replace(parts.password, "***"))
    return repr(value)
