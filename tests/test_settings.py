"""Settings come from the environment; every variable is optional."""

from __future__ import annotations

import ipaddress
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from cryptography.fernet import Fernet

from config.settings import DEFAULT_DATA_DIR, AppKey, Settings, SettingsError

KEY_ONE, KEY_TWO = Fernet.generate_key().decode(), Fernet.generate_key().decode()


def test_defaults_need_no_environment():
    settings = Settings.from_env({})
    assert settings.mongodb_uri is None
    assert settings.data_dir.is_absolute() and settings.data_dir == DEFAULT_DATA_DIR
    assert settings.rate_limit_multiplier == 1.0
    assert settings.public_url is None and settings.public_origin is None
    assert settings.base_url == "http://127.0.0.1:8080"  # links, until `svc serve` names its address
    assert settings.billing_cron_schedule == "0 0 1 * *"
    assert not settings.cookie_secure
    assert settings.egress_allow_private is False


def test_unset_public_url_links_follow_the_address_served_on():
    """SVC_PUBLIC_URL unset: links start where `svc serve` listens (it sets `local_url`); set, there."""
    import socket

    from api.lifecycle import link_origin

    served = Settings.from_env({}, local_url="http://127.0.0.1:9000")
    assert served.public_url is None and served.base_url == "http://127.0.0.1:9000"
    assert not served.cookie_secure
    public = Settings.from_env({"SVC_PUBLIC_URL": "https://svc.example.com"}, local_url="http://127.0.0.1:9000")
    assert public.base_url == "https://svc.example.com" and public.cookie_secure
    with socket.socket() as loopback:
        loopback.bind(("127.0.0.1", 0))
        assert link_origin(loopback) == f"http://127.0.0.1:{loopback.getsockname()[1]}"
    with socket.socket() as everywhere:  # 0.0.0.0 is no address to open: the machine's name is
        everywhere.bind(("0.0.0.0", 0))
        assert link_origin(everywhere) == f"http://{socket.gethostname()}:{everywhere.getsockname()[1]}"


def test_every_variable_is_read():
    settings = Settings.from_env(
        {
            "SVC_MONGODB_URI": "mongodb://db:27017/prod",
            "SVC_DB_TIMEOUT_SECONDS": "2.5",
            "SVC_DATA_DIR": "/var/lib/svc",
            "SVC_RAY_ADDRESS": "auto",
            "SVC_SECRET_KEYS": f"{KEY_ONE}, {KEY_TWO}",
            "SVC_PUBLIC_URL": "https://svc.example.com/",
            "SVC_PROVIDERB_API_KEY": "b-key",
            "SVC_PROVIDERB_BASE_URL": "http://127.0.0.1:9000/v1",
            "SVC_JUDGE_MODEL": "providerB:mini",
            "SVC_RATE_LIMITS": "10",
            "SVC_TRUSTED_PROXIES": "10.0.0.0/8,192.0.2.1",
            "SVC_EGRESS_ALLOW_PRIVATE": "true",
            "SVC_STRIPE_API_KEY": "sk_test",
            "SVC_SMTP_URL": "smtp://u:p@127.0.0.1:2525",
            "APP_API_KEYS": "inst-1:key-one,bare-key",
            "BILLING_CRON_SCHEDULE": "0 6 1 * *",
        }
    )
    assert settings.mongodb_uri == "mongodb://db:27017/prod"
    assert settings.db_timeout_seconds == 2.5
    assert settings.secret_keys == (KEY_ONE, KEY_TWO)
    assert settings.cookie_secure and settings.public_origin == "https://svc.example.com"
    assert settings.providers["providerB"].api_key == "b-key"
    assert settings.providers["providerA"].api_key is None
    assert settings.rate_limit_multiplier == 10.0
    assert ipaddress.ip_address("192.0.2.1") in settings.trusted_proxies[1]
    assert settings.egress_allow_private is True
    assert settings.app_api_keys == (AppKey(key="key-one", install_id="inst-1"), AppKey(key="bare-key"))
    assert settings.billing_cron_schedule == "0 6 1 * *"


@pytest.mark.parametrize(("raw", "expected"), [("on", 1.0), ("off", None), ("OFF", None), ("0.5", 0.5)])
def test_rate_limit_values(raw, expected):
    assert Settings.from_env({"SVC_RATE_LIMITS": raw}).rate_limit_multiplier == expected


@pytest.mark.parametrize("raw", ["fast", "-1", "0"])
def test_bad_rate_limit_values_are_refused(raw):
    with pytest.raises(SettingsError, match=r"^SVC_RATE_LIMITS=.*accepted: `on`, `off`"):
        Settings.from_env({"SVC_RATE_LIMITS": raw})


# ---- values that stop start-up ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "raw", "words"),
    [
        ("SVC_PUBLIC_URL", "svc.example.com", "http:// or https://"),
        ("SVC_MONGODB_URI", "postgres://db", "mongodb://"),
        ("SVC_SMTP_URL", "mail.example.com:25", "smtp://"),
        ("SVC_SMTP_URL", "smtp://mail:99999", "port"),
        ("SVC_MAIL_FROM", "nobody", "email address"),
        ("SVC_PRO_PRICE_CENTS", "12.5", "whole number"),
        ("SVC_PRO_PRICE_CENTS", "10", "below 50"),
        ("SVC_ACTOR_IDLE_SECONDS", "soon", "positive number"),
        ("SVC_SCHEDULER", "maybe", "`on` or `off`"),
        ("SVC_EGRESS_ALLOW_PRIVATE", "perhaps", "yes/no"),
        ("SVC_TRUSTED_PROXIES", "10.0.0.0/8,not-an-ip", "not-an-ip"),
        ("SVC_JUDGE_MODEL", "providerZ:huge", "catalogue model id"),
        ("BILLING_CRON_SCHEDULE", "every day", "5-field cron"),
        ("SVC_PROVIDERB_BASE_URL", "localhost:11434", "http"),
        ("SVC_ORCHB_BASE_URL", "ftp://x", "http"),
        ("APP_API_KEYS", "inst-1:", "empty install id or key"),
        ("SVC_RAY_ADDRESS", "ray-head", "needs its port"),
        ("SVC_RAY_ADDRESS", "http://ray-head:10001", "ray://host:port"),
        ("SVC_RAY_ADDRESS", "ray://ray-head:ten", "port"),
        ("SVC_ACTOR_MEMORY_MB", "16", "below 32"),
        ("SVC_ACTOR_MEMORY_MB", "1.5", "whole number"),
        ("SVC_CALLBACK_MAX_ATTEMPTS", "0", "below 1"),
        ("SVC_CALLBACK_MAX_ATTEMPTS", "5000", "above 1000"),
        ("SVC_MONGODB_URI", "mongodb:///svc", "no host"),
        ("SVC_METRICS_TOKEN", "two words", "space"),
        ("SVC_DB_TIMEOUT_SECONDS", "0", "positive"),
    ],
)
def test_a_bad_value_is_one_line_naming_the_variable_and_the_accepted_form(name, raw, words):
    with pytest.raises(SettingsError) as caught:
        Settings.from_env({name: raw})
    message = str(caught.value)
    assert message.startswith(f"{name}=") and "\n" not in message
    assert words in message and "accepted:" in message


@pytest.mark.parametrize(
    "address", ["auto", "127.0.0.1:6379", "[::1]:6379", "ray://ray-head:10001", "ray://h"]
)
def test_ray_addresses_ray_accepts_are_accepted(address):
    assert Settings.from_env({"SVC_RAY_ADDRESS": address}).ray_address == address


@pytest.mark.parametrize(
    ("field", "value", "variable"),
    [
        ("actor_memory_mb", 8, "SVC_ACTOR_MEMORY_MB"),
        ("callback_max_attempts", 0, "SVC_CALLBACK_MAX_ATTEMPTS"),
    ],
)
def test_a_range_error_names_the_variable_not_the_field(field, value, variable):
    with pytest.raises(SettingsError) as caught:
        Settings.from_env({}, **{field: value})
    assert str(caught.value).startswith(f"{variable}='{value}':") and "accepted:" in str(caught.value)
    assert field not in str(caught.value)


def test_a_data_dir_that_is_a_file_is_refused(tmp_path):
    (tmp_path / "file").write_text("")
    with pytest.raises(SettingsError, match=r"^SVC_DATA_DIR=.*names a file"):
        Settings.from_env({"SVC_DATA_DIR": str(tmp_path / "file")})


def test_a_secret_value_is_never_echoed():
    with pytest.raises(SettingsError) as caught:
        Settings.from_env({"SVC_SECRET_KEYS": "not-a-fernet-key-but-secret"})
    assert "not-a-fernet-key-but-secret" not in str(caught.value) and "<hidden>" in str(caught.value)
    with pytest.raises(SettingsError) as caught:
        Settings.from_env({"SVC_SMTP_URL": "smtp://u:hunter2@mail:99999"})
    assert "hunter2" not in str(caught.value)


def test_a_relative_data_dir_is_made_absolute(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert Settings.from_env({"SVC_DATA_DIR": "data"}).data_dir == tmp_path / "data"
    assert Settings.from_env({}).data_dir == DEFAULT_DATA_DIR


def run_python(code: str, cwd: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    """A fresh interpreter, as start-up sees the environment (no test overrides)."""
    base = {k: v for k, v in os.environ.items() if not k.startswith(("SVC_", "APP_API_KEYS", "BILLING_"))}
    base["PYTHONPATH"] = str(ROOT)
    return subprocess.run(
        [sys.executable, "-c", code], cwd=cwd, env={**base, **env}, capture_output=True, text=True, timeout=60
    )


def test_start_up_stops_with_one_line_and_no_traceback(tmp_path):
    done = run_python(
        "from config.settings import settings_or_exit; settings_or_exit()",
        tmp_path,
        {"SVC_RATE_LIMITS": "fast"},
    )
    assert done.returncode == 2
    assert done.stderr.strip().splitlines() == [
        "error: SVC_RATE_LIMITS='fast': neither on, off nor a number; "
        "accepted: `on`, `off` or a positive multiplier such as `10`"
    ]
    assert "Traceback" not in done.stderr


def test_a_dotenv_file_is_read_and_the_environment_wins(tmp_path):
    (tmp_path / ".env").write_text(
        "# comment\nSVC_RATE_LIMITS=5\nSVC_PUBLIC_URL=https://from-file.example\n"
        "SVC_ORCHB_BASE_URL=http://127.0.0.1:9/orchb\nUNRELATED=1\n"
    )
    code = (
        "import os; from config.settings import Settings; s = Settings.from_env(); "
        "print(s.rate_limit_multiplier, s.public_url, os.environ['SVC_ORCHB_BASE_URL'])"
    )
    done = run_python(code, tmp_path, {"SVC_PUBLIC_URL": "https://from-env.example"})
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["5.0", "https://from-env.example", "http://127.0.0.1:9/orchb"]
    other = tmp_path / "prod.env"
    other.write_text("SVC_RATE_LIMITS=off\n")
    done = run_python(
        code.replace("os.environ['SVC_ORCHB_BASE_URL']", "''"), tmp_path, {"SVC_ENV_FILE": str(other)}
    )
    assert done.stdout.split()[0] == "None", done.stderr
    done = run_python(code, tmp_path, {"SVC_ENV_FILE": str(tmp_path / "missing.env")})
    assert done.returncode != 0 and "SVC_ENV_FILE" in done.stderr


def test_a_secrets_directory_is_read_between_the_environment_and_the_dotenv_file(tmp_path):
    """A mounted Kubernetes Secret: one file per variable, named after it."""
    secrets = tmp_path / "secrets"
    secrets.mkdir()
    (secrets / "SVC_RATE_LIMITS").write_text("7\n")
    (secrets / "SVC_PUBLIC_URL").write_text("https://from-dir.example")
    (secrets / "SVC_METRICS_TOKEN").write_text("from-the-secret\n")
    (secrets / "NOT_A_SETTING").write_text("ignored")
    (tmp_path / ".env").write_text("SVC_RATE_LIMITS=5\nSVC_METRICS_TOKEN=from-dotenv\n")
    code = (
        "from config.settings import Settings; s = Settings.from_env(); "
        "print(s.rate_limit_multiplier, s.public_url, s.metrics_token)"
    )
    env = {"SVC_SECRETS_DIR": str(secrets), "SVC_PUBLIC_URL": "https://from-env.example"}
    done = run_python(code, tmp_path, env)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["7.0", "https://from-env.example", "from-the-secret"]
    done = run_python(code, tmp_path, {"SVC_SECRETS_DIR": str(tmp_path / "nowhere")})
    assert done.returncode != 0 and "SVC_SECRETS_DIR" in done.stderr and "no such directory" in done.stderr


# ---- docs/settings.md lists every variable the code reads ---------------------------------------

ROOT = Path(__file__).resolve().parent.parent
VARIABLE_RE = re.compile(r"\b(SVC_[A-Z0-9_]*[A-Z0-9]|APP_API_KEYS|BILLING_CRON_SCHEDULE)\b")
# A variable name as code spells it: a string literal.
LITERAL_RE = re.compile(r"[\"'](SVC_[A-Z0-9_]*[A-Z0-9]|APP_API_KEYS|BILLING_CRON_SCHEDULE)[\"']")


def variables_in_code() -> set[str]:
    """Every SVC_* (and spec) variable named in product code, expanding SVC_PROVIDER{A,B,C}."""
    names: set[str] = set()
    for folder in ("api", "svc", "actors", "plugins", "config"):
        for path in (ROOT / folder).rglob("*.py"):
            text = path.read_text()
            names |= set(LITERAL_RE.findall(text))
            if "SVC_PROVIDER{" in text:
                names |= {f"SVC_PROVIDER{p}_{s}" for p in "ABC" for s in ("API_KEY", "BASE_URL")}
    # Passed to orchA agents in their adapter environment, not read by the service; markers the
    # service puts on the processes it starts, so it can stop them (docs/lifecycle.md).
    # `svc templates` (a client of a running service) reads SVC_URL and SVC_API_KEY; both are listed
    # apart in docs/settings.md, not among the service's settings.
    return names - {
        "SVC_INSTALL_TOKEN",
        "SVC_INGEST_URL",
        "SVC_PROCESS_MARKER",
        "SVC_RAY_TOKEN",
        "SVC_URL",
        "SVC_API_KEY",
    }


def test_docs_list_every_setting_the_code_reads():
    docs = (ROOT / "docs" / "settings.md").read_text()
    documented = set(VARIABLE_RE.findall(docs))
    for letter in "ABC":  # the table's "SVC_PROVIDERA_API_KEY / _BASE_URL (B, C too)" row
        documented |= {f"SVC_PROVIDER{letter}_API_KEY", f"SVC_PROVIDER{letter}_BASE_URL"}
    missing = sorted(variables_in_code() - documented)
    assert not missing, f"docs/settings.md does not list {missing}"
    from config.settings import VARIABLES

    assert {v.name for v in VARIABLES} >= variables_in_code(), "config/settings.py VARIABLES is behind"


def test_the_settings_check_command(tmp_path):
    """`python -m config.check` reads the settings as start-up does and starts nothing."""
    base = {k: v for k, v in os.environ.items() if not k.startswith(("SVC_", "APP_API_KEYS", "BILLING_"))}
    base["PYTHONPATH"] = str(ROOT)

    def check(**env: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "config.check"],
            cwd=tmp_path,
            env={**base, **env},
            capture_output=True,
            text=True,
            timeout=60,
        )

    done = check(SVC_DATA_DIR="data")
    assert done.returncode == 0 and f"data directory {tmp_path / 'data'}" in done.stdout, done.stderr
    done = check(SVC_SCHEDULER="sometimes")
    assert done.returncode == 2 and done.stderr.count("\n") == 1 and "SVC_SCHEDULER" in done.stderr
