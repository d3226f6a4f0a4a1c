"""Installs: create, list, configure, remove; platforms; the secret vault look-up; whoami."""

from __future__ import annotations

from typing import Any

from aiohttp import web
from pydantic import BaseModel, Field

from api.bodies import read_json
from api.context import principal, services, user_id
from api.errors import error_response
from api.routing import RouteTable
from api.schemas import (
    CallbackSecret,
    CredentialsUpdated,
    InstallCreated,
    InstallDeleted,
    InstallList,
    InvokeReply,
    KeysUpdated,
    KnownSecrets,
    ManagedInstallList,
    PlatformList,
    RunRecorded,
    WhoAmI,
)
from svc.installs import CreateInstallBody
from svc.runs import InvokeBody, SelfReportBody

routes = RouteTable()
# 500 names with values of a few hundred bytes fit easily; the app-wide cap is 2 MiB.
SECRETS_BODY_MAX_BYTES = 1024 * 1024


class KnownSecretsQuery(BaseModel):
    """Query of GET /api/secrets/known."""

    companyId: str = Field(min_length=1, max_length=200)
    keys: str = Field(min_length=1, max_length=10_000, description="comma-separated secret names")


class DeleteQuery(BaseModel):
    """Query of DELETE /api/installs/:id."""

    removeUpstream: bool = Field(
        default=False, description="also delete the agents upstream on platforms other than orchC"
    )


@routes.get("/api/platforms", auth="P", response=PlatformList)
async def list_platforms(request: web.Request) -> web.Response:
    """The platforms installs can target (the managed runtime `svc` is not listed)."""
    platforms: list[dict[str, Any]] = [
        {
            "id": p.id,
            "label": p.label,
            "credentialFields": [vars(field) for field in p.credential_fields],
            "capabilities": {
                **vars(p.capabilities),
                "supportedModels": list(p.capabilities.supportedModels)
                if p.capabilities.supportedModels is not None
                else None,
            },
        }
        for p in services(request).plugins.platforms()
        if p.listed
    ]
    return web.json_response({"platforms": platforms})


@routes.post("/api/installs", auth="K", body=CreateInstallBody, status=201, response=InstallCreated)
async def create_install(request: web.Request, body: CreateInstallBody) -> web.Response:
    """Install a published template onto a platform."""
    return web.json_response(await services(request).installs.create(principal(request), body), status=201)


@routes.get("/api/installs", auth="K", response=InstallList)
async def list_installs(request: web.Request) -> web.Response:
    """The caller's installs, newest first."""
    return web.json_response({"installs": await services(request).installs.list(principal(request))})


@routes.get("/api/installs/mine", auth="S", response=ManagedInstallList)
async def my_installs(request: web.Request) -> web.Response:
    """Managed installs the user deployed or reaches through an org, with what is missing."""
    return web.json_response(await services(request).installs.mine(user_id(request)))


@routes.get("/api/installs/whoami", auth="AK", key_fallback=True, response=WhoAmI)
async def whoami(request: web.Request) -> web.Response:
    """The install an application key (or a key linked to an install) is scoped to."""
    caller = principal(request)
    install_id = caller.install_id or caller.linked_install_id
    if install_id is None:
        return error_response(
            400,
            "key not linked to a pipeline install",
            hint="Scope the key as <installId>:<key> in APP_API_KEYS, "
            "or use the key that created an svc install",
        )
    return web.json_response({"installId": install_id})


@routes.patch("/api/installs/{installId}/variables", auth="K", response=KeysUpdated)
async def set_variables(request: web.Request) -> web.Response:
    """Merge install variables (flat, or wrapped in `variables`)."""
    install_id = request.match_info["installId"]
    updated = await services(request).installs.set_variables(
        principal(request), install_id, await read_json(request)
    )
    return web.json_response({"ok": True, "installId": install_id, "updatedKeys": updated})


@routes.patch("/api/installs/{installId}/secrets", auth="K", response=KeysUpdated)
async def set_secrets(request: web.Request) -> web.Response:
    """Merge install secrets (flat, or wrapped in `secrets`); stored encrypted."""
    install_id = request.match_info["installId"]
    updated = await services(request).installs.set_secrets(
        principal(request), install_id, await read_json(request, SECRETS_BODY_MAX_BYTES)
    )
    return web.json_response({"ok": True, "installId": install_id, "updatedKeys": updated})


@routes.post("/api/installs/{id}/callback-secret", auth="K/S", status=201, response=CallbackSecret)
async def rotate_callback_secret(request: web.Request) -> web.Response:
    """Make (or replace) the secret that signs this install's callbacks; shown once."""
    installs = services(request).installs
    result = await installs.rotate_callback_secret(principal(request), request.match_info["id"])
    return web.json_response(result, status=201)


@routes.patch("/api/installs/{installId}/credentials", auth="K", response=CredentialsUpdated)
async def set_credentials(request: web.Request) -> web.Response:
    """Rotate platform credentials (flat, or wrapped in `credentials`); stored encrypted."""
    install_id = request.match_info["installId"]
    updated = await services(request).installs.set_credentials(
        principal(request), install_id, await read_json(request)
    )
    return web.json_response({"ok": True, "installId": install_id, "updatedKeys": updated})


@routes.delete("/api/installs/{installId}", auth="K", query=DeleteQuery, response=InstallDeleted)
async def delete_install(request: web.Request, query: DeleteQuery) -> web.Response:
    """Cancel an install (orchC: delete its agents and aliases and forget its credentials)."""
    result = await services(request).installs.delete(
        principal(request), request.match_info["installId"], query.removeUpstream
    )
    return web.json_response(result)


@routes.post("/api/installs/{installId}/invoke", auth="K", body=InvokeBody, response=InvokeReply)
async def invoke(request: web.Request, body: InvokeBody) -> web.Response:
    """Send one input to an orchC team through the service (counts and tokens are recorded)."""
    result = await services(request).installs.invoke(
        principal(request), request.match_info["installId"], body
    )
    return web.json_response(result)


@routes.post("/api/installs/{installId}/runs", auth="K", body=SelfReportBody, response=RunRecorded)
async def report_run(request: web.Request, body: SelfReportBody) -> web.Response:
    """Record a run made directly on the platform (deduplicated by runId)."""
    run_id = await services(request).installs.report_run(
        principal(request), request.match_info["installId"], body
    )
    return web.json_response({"ok": True, "runId": run_id})


@routes.get("/api/secrets/known", auth="K", query=KnownSecretsQuery, response=KnownSecrets)
async def known_secrets(request: web.Request, query: KnownSecretsQuery) -> web.Response:
    """Which of these secret names the vault already holds for the company."""
    keys = [key.strip() for key in query.keys.split(",") if key.strip()]
    known = await services(request).installs.known_secrets(principal(request), query.companyId, keys)
    return web.json_response({"known": known})
