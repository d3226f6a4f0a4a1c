"""Settings come from the environment; every variable is optional."""

from __future__ import annotations

import ipaddress
from pathlib import Path

import pytest
from pydantic import ValidationError

from config.settings import AppKey, Settings


def test_defaults_need_no_environment():
    settings = Settings.from_env({})
    assert settings.mongodb_uri is None
    assert settings.data_dir == Path("./.svc-data")
    assert settings.rate_limit_multiplier == 1.0
    assert settings.public_url == "http://127.0.0.1:8080"
    assert settings.billing_cron_schedule == "0 0 1 * *"
    assert not settings.cookie_secure
    assert settings.egress_allow_private is False


def test_every_variable_is_read():
    settings = Settings.from_env(
        {
            "SVC_MONGODB_URI": "mongodb://db:27017/prod",
            "SVC_DATA_DIR": "/var/lib/svc",
            "SVC_RAY_ADDRESS": "auto",
            "SVC_SECRET_KEYS": "k1, k2",
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
    assert settings.secret_keys == ("k1", "k2")
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
    with pytest.raises((ValueError, ValidationError)):
        Settings.from_env({"SVC_RATE_LIMITS": raw})
