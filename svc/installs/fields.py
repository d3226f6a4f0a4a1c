"""The install body and its checks against the platform: fields, credentials, variables,
secret names, the team's depth and the payment fields (the one check that reads the store)."""

from __future__ import annotations

import re
from typing import Annotated, Any

from pydantic import Field

from config.catalogue import DEFAULT_PLATFORM
from plugins.types import OPTIONAL_FIELDS, PlatformInfo
from svc.core import BadRequest, DisplayName, Encrypted, PaymentLookups, RequestBody
from svc.templates import VARIABLE_REFERENCE, hierarchy_depth

SECRET_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,127}$")
# Names an install may hold, as the org vault holds at most 500: each is a vault write and
# is substituted into every prompt, so an unbounded map is a cost and a slow request.
MAX_INSTALL_SECRETS = 500
# A credential, variable or secret value, as `unwrap` bounds the PATCH forms.
FieldValue = Annotated[str, Field(max_length=65_536)]
BILLING_FIELDS = ("deployerEmail", "payCustomerId", "payPaymentMethodId")
# Credentials the spec lets the body carry at its top level (a platform's `top_level_credentials`).
TOP_LEVEL_CREDENTIALS = ("orchABaseUrl", "orchAApiKey")
# The Fernet fields this package stores (`svc keys rotate` re-encrypts them).
ENCRYPTED = (
    Encrypted("installs", "secretsEncrypted", many=True),
    # Issue 34: the new secrets of a move waiting for the org's approval (svc/installs/upgrades.py).
    Encrypted("installs", "pendingUpgrade.secretsEncrypted", many=True),
    Encrypted("installs", "credentialsEncrypted"),
    Encrypted("installs", "platformStateEncrypted"),
    Encrypted("installs", "webhookSecretEncrypted"),
    Encrypted("installs", "webhookTokenEncrypted"),
    Encrypted("installs", "callbackSecretEncrypted"),
    Encrypted("vault_secrets", "valueEncrypted"),
)


class CreateInstallBody(RequestBody):
    """POST /api/installs."""

    templateId: str = Field(min_length=1, max_length=64)
    platform: str = Field(default=DEFAULT_PLATFORM, max_length=64)
    credentials: dict[str, FieldValue] | None = Field(default=None, max_length=50)
    variables: dict[str, FieldValue] | None = Field(default=None, max_length=100)
    secrets: dict[str, FieldValue] | None = Field(default=None, max_length=MAX_INSTALL_SECRETS)
    model: str | None = Field(default=None, max_length=100)
    companyId: str | None = Field(default=None, max_length=200)
    companyName: DisplayName | None = Field(default=None, max_length=200)
    adapterType: str | None = Field(default=None, max_length=50)
    webhookUrl: str | None = Field(default=None, max_length=2048)
    cwd: str | None = Field(default=None, max_length=1024)
    orchABaseUrl: str | None = Field(default=None, max_length=2048)
    orchAApiKey: str | None = Field(default=None, max_length=1024)
    deployerEmail: str | None = Field(default=None, max_length=254)
    payCustomerId: str | None = Field(default=None, max_length=200)
    payPaymentMethodId: str | None = Field(default=None, max_length=200)


def interpolate(definition: dict[str, Any], variables: dict[str, str]) -> dict[str, Any]:
    """The definition with `{{name}}` replaced in every prompt where a value is known."""

    def fill(match: re.Match[str]) -> str:
        return variables.get(match.group(1), match.group(0))

    agents = [
        {**agent, "prompt": VARIABLE_REFERENCE.sub(fill, agent.get("prompt", ""))}
        for agent in definition["agents"]
    ]
    return {**definition, "agents": agents}


def unwrap(body: Any, wrapper: str) -> dict[str, str]:
    """A flat object or `{wrapper: {...}}`, checked to be names mapped to strings."""
    if not isinstance(body, dict):
        raise BadRequest("Request body must be a JSON object")
    if set(body) == {wrapper} and isinstance(body[wrapper], dict):
        body = body[wrapper]
    if not body:
        raise BadRequest(f"No {wrapper} given")
    for name, value in body.items():
        if not isinstance(value, str):
            raise BadRequest(f"{wrapper}.{name}: must be a string")
        if len(value) > 65_536:
            raise BadRequest(f"{wrapper}.{name}: longer than 65536 characters")
    return dict(body)


def platform_fields(
    platform: PlatformInfo, platforms: list[PlatformInfo], body: CreateInstallBody
) -> dict[str, Any]:
    """The optional fields sent, each checked against what the platform accepts."""
    sent = {name for name in body.model_fields_set if getattr(body, name) is not None}
    credentials = dict(body.credentials or {})
    for top_level in TOP_LEVEL_CREDENTIALS:
        if top_level in sent:
            if top_level not in platform.traits.top_level_credentials or "companyName" not in sent:
                takers = [p.id for p in platforms if top_level in p.traits.top_level_credentials]
                raise BadRequest(
                    f"{top_level} is only valid at the top level for platform "
                    f"{' or '.join(takers) or 'none'} with companyName"
                )
            credentials.setdefault(top_level, getattr(body, top_level))
            sent.add("credentials")
    fields: dict[str, Any] = {}
    for name in OPTIONAL_FIELDS:
        if name not in sent:
            continue
        if name not in platform.accepts:
            takers = [p.id for p in platforms if name in p.accepts]
            where = f"platform {' or '.join(takers)}" if takers else "no platform"
            raise BadRequest(f"{name} is only valid for {where} (not {platform.id})")
        fields[name] = credentials if name == "credentials" else getattr(body, name)
    if platform.credential_fields or "credentials" in fields:
        check_credentials(platform, credentials)
        fields["credentials"] = credentials
    return fields


def check_credentials(platform: PlatformInfo, credentials: dict[str, str]) -> None:
    known = {field.key for field in platform.credential_fields}
    for name in credentials:
        if name not in known:
            raise BadRequest(f"credentials.{name} is not a credential of platform {platform.id}")
    for field in platform.credential_fields:
        if field.required and not credentials.get(field.key, "").strip():
            raise BadRequest(f"credentials.{field.key} is required for platform {platform.id}")


def check_variables(definition: dict[str, Any], variables: dict[str, str]) -> dict[str, str]:
    declared = set(definition.get("requiredVariables") or [])
    for name in variables:
        if name not in declared:
            raise BadRequest(f"variables.{name} is not a required variable of this template")
    return variables


def check_secret_names(values: dict[str, str]) -> dict[str, str]:
    if len(values) > MAX_INSTALL_SECRETS:
        raise BadRequest(f"secrets: at most {MAX_INSTALL_SECRETS} names per install (got {len(values)})")
    for name in values:
        if not SECRET_NAME.fullmatch(name):
            raise BadRequest(f"secrets.{name}: not a valid secret name (letters, digits, _)")
    return values


def check_depth(platform: PlatformInfo, definition: dict[str, Any]) -> None:
    """400 for a team deeper than the platform takes (unless its driver flattens deeper teams)."""
    limit = platform.capabilities.maxHierarchyDepth
    if limit is None or platform.traits.flattens_hierarchy:
        return
    depth = hierarchy_depth(definition)
    if depth > limit:
        raise BadRequest(
            f"platform {platform.id} takes teams at most {limit} level(s) deep below the root agent; "
            f"this team is {depth} deep"
        )


async def check_payment_fields(payments: PaymentLookups, body: CreateInstallBody) -> None:
    """A customer must be one our setup-intent created, for the deployer's email: nobody
    bills their usage to a customer id they happened to learn."""
    if body.payPaymentMethodId is not None and body.payCustomerId is None:
        raise BadRequest("payPaymentMethodId needs payCustomerId")
    if body.payCustomerId is None:
        return
    customer_email = await payments.customer_email(body.payCustomerId)
    if customer_email is None:
        raise BadRequest("payCustomerId: unknown customer; create one with POST /api/stripe/setup-intent")
    if (body.deployerEmail or "").strip().lower() != customer_email:
        raise BadRequest("deployerEmail must be the email the payment customer was created for")
