"""Templates: the lifecycle, versions, the public list, pricing and the definition schema."""

from __future__ import annotations

import json

from aiohttp import web
from pydantic import BaseModel, Field

from api.bodies import read_json
from api.context import PRINCIPAL, principal, services
from api.routing import RouteTable
from api.schemas import (
    DefinitionReport,
    ExportSchemaDocument,
    TeamSchemaDocument,
    TemplateExportDocument,
    VersionDiff,
)
from svc.identity import Principal
from svc.templates import (
    LIST_DEFAULT,
    LIST_MAX,
    CreateTemplateBody,
    ImportQuery,
    PricingBody,
    PricingOut,
    PublishBody,
    RollbackBody,
    TemplateList,
    TemplateOut,
    UpdateTemplateBody,
    ValidateBody,
    VersionList,
    export_schema,
    json_schema,
)

routes = RouteTable()
SCHEMA_BODY = json.dumps(json_schema(), indent=2).encode()
EXPORT_SCHEMA_BODY = json.dumps(export_schema(), indent=2).encode()
SCHEMA_HEADERS = {"Cache-Control": "public, max-age=86400, immutable", "Access-Control-Allow-Origin": "*"}


class ExportQuery(BaseModel):
    """Query of GET /api/templates/:id/export."""

    history: bool = False


class ListQuery(BaseModel):
    """Query of GET /api/templates."""

    limit: int = Field(default=LIST_DEFAULT, ge=1, le=LIST_MAX)
    cursor: str | None = Field(default=None, max_length=200)
    q: str | None = Field(
        default=None, max_length=200, description="only templates whose name, slug or description contains it"
    )


def caller_or_none(request: web.Request) -> Principal | None:
    """The key holder on a public route, or None."""
    return request[PRINCIPAL]


@routes.get("/api/templates", auth="P", optional_key=True, query=ListQuery, response=TemplateList)
async def list_templates(request: web.Request, query: ListQuery) -> web.Response:
    """Published public templates (and, with a key, the caller's own team ones), newest first;
    `q` searches their names, slugs and descriptions."""
    templates, next_cursor = await services(request).templates.list_published(
        caller_or_none(request), query.limit, query.cursor, query.q or None
    )
    return web.json_response({"templates": templates, "nextCursor": next_cursor})


@routes.post("/api/templates", auth="K", body=CreateTemplateBody, status=201, response=TemplateOut)
async def create_template(request: web.Request, body: CreateTemplateBody) -> web.Response:
    """Create a template in draft status."""
    template = await services(request).templates.create(principal(request), body)
    return web.json_response(template, status=201)


@routes.post("/api/templates/validate", auth="K/S", body=ValidateBody, response=DefinitionReport)
async def validate_definition(request: web.Request, body: ValidateBody) -> web.Response:
    """Check a definition without saving it: errors at their paths (what publishing would refuse),
    and warnings for agents on a model whose provider is not configured on this server."""
    return web.json_response(services(request).definitions.check(body.definition).as_dict())


@routes.get("/api/templates/{id}", auth="P", optional_key=True, response=TemplateOut)
async def get_template(request: web.Request) -> web.Response:
    """One template: a published public one, or any of the caller's own."""
    template = await services(request).templates.get(caller_or_none(request), request.match_info["id"])
    return web.json_response(template)


@routes.get("/api/templates/{id}/versions", auth="P", optional_key=True, response=VersionList)
async def list_versions(request: web.Request) -> web.Response:
    """Published versions, newest first, with change logs and semver bumps."""
    versions = await services(request).templates.versions(caller_or_none(request), request.match_info["id"])
    return web.json_response({"versions": versions})


@routes.patch("/api/templates/{id}", auth="K", body=UpdateTemplateBody, response=TemplateOut)
async def update_template(request: web.Request, body: UpdateTemplateBody) -> web.Response:
    """Edit a draft or a version draft (409 on a published template)."""
    templates = services(request).templates
    template = await templates.update_draft(principal(request), request.match_info["id"], body)
    return web.json_response(template)


@routes.post("/api/templates/{id}/publish", auth="K", body=PublishBody, response=TemplateOut)
async def publish_template(request: web.Request, body: PublishBody) -> web.Response:
    """Publish a draft, or merge a version draft into its parent."""
    template = await services(request).templates.publish(principal(request), request.match_info["id"], body)
    return web.json_response(template)


@routes.post("/api/templates/{id}/new-version", auth="K", status=201, response=TemplateOut)
async def new_version(request: web.Request) -> web.Response:
    """Open a version draft of a published template."""
    draft = await services(request).templates.new_version(principal(request), request.match_info["id"])
    return web.json_response(draft, status=201)


@routes.post("/api/templates/{id}/rollback", auth="K", body=RollbackBody, status=201, response=TemplateOut)
async def rollback(request: web.Request, body: RollbackBody) -> web.Response:
    """Open a version draft preloaded with an earlier version."""
    draft = await services(request).templates.rollback(principal(request), request.match_info["id"], body)
    return web.json_response(draft, status=201)


@routes.post("/api/templates/{id}/fork", auth="K", status=201, response=TemplateOut)
async def fork(request: web.Request) -> web.Response:
    """Copy a published template into a private draft of the caller's."""
    copy = await services(request).templates.fork(principal(request), request.match_info["id"])
    return web.json_response(copy, status=201)


@routes.post("/api/templates/{id}/archive", auth="K", response=TemplateOut)
async def archive(request: web.Request) -> web.Response:
    """Delist a published template; existing installs keep running."""
    template = await services(request).templates.archive(principal(request), request.match_info["id"])
    return web.json_response(template)


@routes.delete("/api/templates/{id}", auth="K", status=204)
async def delete_template(request: web.Request) -> web.Response:
    """Delete a template (409 with canArchive while it has active installs)."""
    await services(request).templates.delete(principal(request), request.match_info["id"])
    return web.Response(status=204)


@routes.patch("/api/billing/pricing", auth="K", body=PricingBody, response=PricingOut)
async def set_pricing(request: web.Request, body: PricingBody) -> web.Response:
    """Set a template's pricing model and price."""
    return web.json_response(await services(request).templates.set_pricing(principal(request), body))


@routes.get("/api/schema/team/v1.json", auth="P", response=TeamSchemaDocument)
async def team_schema(request: web.Request) -> web.Response:
    """JSON Schema (draft-07) of a team definition, generated from the models."""
    return web.Response(body=SCHEMA_BODY, content_type="application/schema+json", headers=SCHEMA_HEADERS)


@routes.get("/api/schema/template-export/v1.json", auth="P", response=ExportSchemaDocument)
async def export_format_schema(request: web.Request) -> web.Response:
    """JSON Schema (draft-07) of the template export document."""
    return web.Response(
        body=EXPORT_SCHEMA_BODY, content_type="application/schema+json", headers=SCHEMA_HEADERS
    )


@routes.get(
    "/api/templates/{id}/export",
    auth="P",
    optional_key=True,
    query=ExportQuery,
    response=TemplateExportDocument,
)
async def export_template(request: web.Request, query: ExportQuery) -> web.Response:
    """One self-contained JSON document of the template (with its version history if asked)."""
    document = await services(request).portability.export(
        caller_or_none(request), request.match_info["id"], query.history
    )
    return web.json_response(document)


@routes.post("/api/templates/import", auth="K", query=ImportQuery, status=201, response=TemplateOut)
async def import_template(request: web.Request, query: ImportQuery) -> web.Response:
    """A new draft from an exported template (pricing only with `?pricing=true`)."""
    created = await services(request).portability.import_draft(
        principal(request), await read_json(request), query.pricing
    )
    return web.json_response(created, status=201)


@routes.get("/api/templates/{id}/versions/{a}/diff/{b}", auth="P", optional_key=True, response=VersionDiff)
async def diff_versions(request: web.Request) -> web.Response:
    """A structured diff of two published versions, with the bump class and its reasons."""
    info = request.match_info
    return web.json_response(
        await services(request).portability.diff(caller_or_none(request), info["id"], info["a"], info["b"])
    )
