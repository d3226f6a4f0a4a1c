"""The aiohttp application: middlewares, the route table, and start-up/shut-down.

Start-up and shut-down are `cleanup_ctx` generators, so they are symmetric and
tests exercise both: the database (embedded or external), then Ray, then the
services wired on top of them.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Sequence

from aiohttp import web

from actors.runtime import RayRuntime
from actors.scheduler import SchedulerKeeper
from api import metrics, pages
from api.auth import authenticate, bearer_token, optional_key
from api.bodies import parse_body, parse_query
from api.context import PATH_REDACTOR, PRINCIPAL, ROUTE_TABLE, SERVICES, SETTINGS
from api.handlers import (
    accounts,
    authoring,
    billing,
    caps,
    console,
    evals,
    health,
    installs,
    mcp,
    openapi,
    orgs,
    run_watch,
    runs,
    runtime,
    templates,
    upgrades,
)
from api.heavy import HEAVY_GATE, HeavyGate, is_heavy
from api.lifecycle import timed
from api.logs import PathRedactor
from api.middleware import rate_limit, request_context, traced
from api.routing import Handler, Route
from config import catalogue
from config.settings import Settings
from plugins.tracing import sdk as tracing_sdk
from svc.core import Store, Vault, is_api_key
from svc.installs import InstallReads
from svc.runs import backfill_newest_runs
from svc.subprocesses import EmbeddedMongo
from svc.templates import backfill_install_counts
from svc.wiring import build_services, dropped_spans

log = logging.getLogger(__name__)
SCHEDULER_CHECK_S = 30.0
DATABASE_CHECK_S = 2.0
SCHEDULER_STOP_S = 5.0
INVITATION_LINK = "/invitations/{token}"

ROUTES: tuple[Route, ...] = (
    *health.routes,
    *accounts.routes,
    *installs.routes,
    *upgrades.routes,
    *authoring.routes,
    *evals.routes,
    *templates.routes,
    *runtime.routes,
    *console.routes,
    *billing.routes,
    *orgs.routes,
    *runs.routes,
    *run_watch.routes,
    *caps.routes,
    *mcp.routes,
    *openapi.routes,
)
STORE = web.AppKey("store", Store)
RUNTIME = web.AppKey("runtime", RayRuntime)
VAULT = web.AppKey("vault", Vault)


def create_app(settings: Settings, *, extra_routes: Sequence[Route] = ()) -> web.Application:
    """Build the application; nothing connects until it starts."""
    # The deployment's model names (SVC_MODELS_FILE) are the ones this process calls with.
    catalogue.use(settings.upstream_models, settings.bedrock_models, settings.orch_a_models)
    app = web.Application(
        middlewares=[traced, metrics.measure, request_context, rate_limit],
        client_max_size=settings.max_body_bytes,
    )
    app[SETTINGS] = settings
    app[ROUTE_TABLE] = (*ROUTES, *extra_routes)
    app[HEAVY_GATE] = HeavyGate()
    for route in app[ROUTE_TABLE]:
        app.router.add_route(route.method, route.path, guarded(route))
    # The invitation mail's link is not a route but lands in the log when followed.
    app[PATH_REDACTOR] = PathRedactor([*(route.path for route in app[ROUTE_TABLE]), INVITATION_LINK])
    app.router.add_routes(openapi.pages)
    metrics.setup(app)
    app.cleanup_ctx.extend(
        [
            timed("database", database),
            timed("traces", traces),
            timed("Ray", ray_runtime),
            timed("domain services", domain_services),
        ]
    )
    pages.setup(app)  # the operator dashboard, outside /api
    app.on_shutdown.append(run_watch.end_streams)
    return app


def guarded(route: Route) -> Handler:
    """The handler behind a check of the route's auth code (and, for a heavy route, a slot)."""
    heavy = is_heavy(route.method, route.path)

    async def handler(request: web.Request) -> web.StreamResponse:
        if route.optional_key:
            request[PRINCIPAL] = await optional_key(request)
        elif route.key_fallback and is_api_key(bearer_token(request) or ""):
            request[PRINCIPAL] = await authenticate(request, "K")
        else:
            request[PRINCIPAL] = await authenticate(request, route.auth)
        args: list[object] = []
        if route.query is not None:
            args.append(parse_query(request, route.query))
        if route.body is not None:
            args.append(await parse_body(request, route.body))
        if heavy:
            return await request.app[HEAVY_GATE].run(lambda: route.handler(request, *args))
        return await route.handler(request, *args)

    handler.__name__ = route.handler.__name__
    handler.__doc__ = route.handler.__doc__
    return handler


async def database(app: web.Application) -> AsyncIterator[None]:
    """Connect to SVC_MONGODB_URI, or start the embedded server; create indexes."""
    settings = app[SETTINGS]
    embedded: EmbeddedMongo | None = None
    uri = settings.mongodb_uri
    if uri is None:
        embedded = EmbeddedMongo(settings.data_dir, sync=settings.embedded_db_sync)
        uri = await embedded.start()
    store = Store.connect(uri, settings.db_timeout_seconds)
    watcher = asyncio.create_task(keep_database(embedded)) if embedded is not None else None
    try:
        await store.ensure_indexes()
        # Records written before these structures existed (each a no-op once done).
        await backfill_install_counts(store, InstallReads(store))
        await backfill_newest_runs(store)
        app[STORE] = store
        yield
    finally:
        if watcher is not None:
            watcher.cancel()
            await asyncio.wait([watcher])
        await store.close()
        if embedded is not None:
            await embedded.stop()


async def keep_database(embedded: EmbeddedMongo) -> None:
    """Start the embedded database again if it dies while this process uses it (every 2 s).

    Its port is kept, so this process's client, the other API processes and the actors
    reconnect by themselves (storage.md). A local check: no database round trip.
    """
    while True:
        await asyncio.sleep(DATABASE_CHECK_S)
        try:
            await embedded.revive()
        except Exception as exc:  # retried on the next round
            log.warning("could not start the embedded database again: %s", type(exc).__name__)


async def traces(app: web.Application) -> AsyncIterator[None]:
    """This process's traces (OTEL_* settings; nothing without an endpoint), flushed on stop."""
    settings = app[SETTINGS]
    stop = tracing_sdk.setup(settings.tracing, "api", on_dropped=dropped_spans(app[STORE], "api"))
    try:
        yield
    finally:
        await asyncio.to_thread(stop)


async def ray_runtime(app: web.Application) -> AsyncIterator[None]:
    """Join or start Ray; publish the configuration its actors read (actors/deployment.py)."""
    settings = app[SETTINGS]
    vault = app[VAULT] = Vault.from_settings(settings.secret_keys, settings.data_dir)
    runtime = RayRuntime(settings.ray_address, app[STORE].uri, settings, vault.keys, app[STORE])
    runtime.start()  # publishes what the deployment's actors read (actors/deployment.py)
    app[RUNTIME] = runtime
    try:
        yield
    finally:
        runtime.stop()


async def domain_services(app: web.Application) -> AsyncIterator[None]:
    """Wire the domain services on top of the store and the runtime; keep the scheduler alive.

    The scheduler actor is never stopped here: it belongs to the deployment, not to this
    process (actors/scheduler.py), and other API processes rely on it.
    """
    settings = app[SETTINGS]
    services = app[SERVICES] = build_services(settings, app[STORE], app[VAULT], app[RUNTIME])
    keeper = (
        asyncio.create_task(keep_scheduler(SchedulerKeeper(app[RUNTIME])))
        if settings.scheduler_enabled
        else None
    )
    try:
        yield
    finally:
        if keeper is not None:
            keeper.cancel()
            # A Ray call still running in a thread would crash the process once Ray disconnects.
            await asyncio.wait([keeper], timeout=SCHEDULER_STOP_S)
        await services.close()


async def keep_scheduler(scheduler: SchedulerKeeper) -> None:
    """Start the scheduler actor, and start it again if it has gone (every 30 s)."""
    while True:
        attempt = asyncio.ensure_future(scheduler.ensure_scheduler())
        try:
            # Shielded: on shut-down the attempt finishes (its Ray calls run in threads) before Ray stops.
            await asyncio.shield(attempt)
        except asyncio.CancelledError:
            await asyncio.wait([attempt], timeout=SCHEDULER_STOP_S)
            if attempt.done() and not attempt.cancelled() and attempt.exception() is not None:
                log.info("scheduler check cut by the stop: %s", type(attempt.exception()).__name__)
            raise
        except Exception as exc:  # retried on the next round
            log.warning("could not start the scheduler: %s", type(exc).__name__)
        await asyncio.sleep(SCHEDULER_CHECK_S)
