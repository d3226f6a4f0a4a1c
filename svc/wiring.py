"""The composition root: the one place that builds the object graph from settings.

The API process (`api.app`), the actors (`actors/`), the CLI (`api.cli`) and the tests all
build their services here, so every process wires the same graph and nothing is patched
after construction. Order follows the packages' layers: core, identity, templates, runs,
installs (with the org governance gate), runtime, orgs, billing.
"""

from __future__ import annotations

import importlib
from collections.abc import Awaitable, Callable, Coroutine, Sequence
from dataclasses import dataclass
from functools import partial
from typing import TYPE_CHECKING, Any

from config.settings import Settings
from plugins.manager import PROVIDER_BUILTINS, Plugins
from svc.core import (
    BufferedMetrics,
    Document,
    Mailer,
    Runtime,
    Store,
    Vault,
    counter_increment,
    write_metrics,
)
from svc.runtime import LLM, CallbackDelivery, CrashPoints, InstallHost, InstallRunner, RunLimits, Settlement

# Spend caps' admission (svc/billing/spend_caps.py): asked before a run is queued (the install), and
# before each model call (the install, and the tokens of the install's other runs in flight).
Admission = Callable[[Document, Sequence[int]], Awaitable[None]]

if TYPE_CHECKING:
    # The rest of the graph is imported where `build_services` builds it, not at module level:
    # an install actor imports this module for `build_install_runner` and must not pay for the
    # payment SDK, orgs or authoring (docs/bench.md, "Runtime").
    from svc.authoring import Authoring
    from svc.billing import Charges, OrgBilling, Payouts, SpendCaps, UsageReport
    from svc.core import TTLCache
    from svc.evals import Evals
    from svc.identity import Accounts, ApiKeys, Credentials, Principal, RateLimiter, UserAdmin
    from svc.installs import AutoUpgrades, Installs, RunPoller, Upgrades
    from svc.orgs import (
        Approvals,
        Invitations,
        OrgAccess,
        OrgKeys,
        Orgs,
        OrgSecrets,
        Plans,
    )
    from svc.runs import RunAnalytics, Runs
    from svc.runtime import (
        McpService,
        Outreach,
        RunDetail,
        RunService,
        RunWatch,
        Schedules,
        SecurityLog,
    )
    from svc.templates import Definitions, Portability, Templates


@dataclass(frozen=True)
class Services:
    """Every domain service of one process, wired together."""

    settings: Settings
    store: Store
    vault: Vault
    runtime: Runtime | None
    plugins: Plugins
    mailer: Mailer
    accounts: Accounts
    user_admin: UserAdmin
    keys: ApiKeys
    credentials: Credentials
    rate_limiter: RateLimiter | None
    templates: Templates
    # Checks definitions against the spec and against the providers configured here (the editor).
    definitions: Definitions
    portability: Portability
    runs: Runs
    run_analytics: RunAnalytics
    run_poller: RunPoller
    installs: Installs
    upgrades: Upgrades  # versions of installs (issue 34, docs/upgrades.md)
    auto_upgrades: AutoUpgrades
    llm: LLM
    run_service: RunService
    # Settles runs whose actor is gone, with their records and callbacks (the job runner's sweeper).
    install_runner: InstallRunner
    security_log: SecurityLog
    schedules: Schedules
    outreach: Outreach
    authoring: Authoring
    org_access: OrgAccess
    orgs: Orgs
    org_invitations: Invitations
    org_keys: OrgKeys
    org_approvals: Approvals
    org_plans: Plans
    org_secrets: OrgSecrets
    usage: UsageReport
    charges: Charges
    payouts: Payouts
    org_billing: OrgBilling
    run_detail: RunDetail
    run_watch: RunWatch
    callbacks: CallbackDelivery
    spend_caps: SpendCaps
    # MCP (issue 32): the catalogue, consent and approvals; test chats' connections.
    mcp: McpService
    # Evals (issue 36): suites, scorecards, the publish gate.
    evals: Evals

    async def delete_user(self, who: str) -> dict[str, Any]:
        """`svc users delete`: end the account (409 while it owns an org), cancel its personal
        installs and archive its published personal templates (docs/auth.md)."""
        from svc.templates import archive_user_templates

        result = await self.user_admin.tombstone(who)
        result["installsCancelled"] = await self.installs.retire_user_installs(result["userId"])
        result["templatesArchived"] = await archive_user_templates(self.store, result["userId"])
        return result

    async def close(self) -> None:
        """Write out what is held in memory (rate-limit counts) before shut-down."""
        await self.run_service.close()
        await self.install_runner.settlement.close()
        if self.rate_limiter is not None:
            await self.rate_limiter.close()
        await self.run_watch.close()

    async def health(self) -> dict[str, bool]:
        """Whether the database and the actor runtime answer."""
        runtime_ok = await self.runtime.ping() if self.runtime is not None else False
        return {"database": await self.store.ping(), "ray": runtime_ok}


def build_services(
    settings: Settings,
    store: Store,
    vault: Vault,
    runtime: Runtime | None,
    plugins: Plugins | None = None,
) -> Services:
    """Wire every service for one process (the API, the scheduler actor, the CLI, tests)."""
    from svc.authoring import Authoring
    from svc.billing import (
        Charges,
        OrgBilling,
        PaymentProvider,
        PaymentReads,
        Payouts,
        SpendCaps,
        UsageReport,
        run_cost,
    )
    from svc.core import TTLCache
    from svc.evals import EvalLimits, Evals, SuiteRunner
    from svc.identity import Accounts, ApiKeys, Credentials, RateLimiter, UserAdmin
    from svc.installs import AutoUpgrades, InstallReads, Installs, RunPoller, Upgrades
    from svc.orgs import (
        Approvals,
        AuditLog,
        Governance,
        Invitations,
        OrgAccess,
        OrgKeys,
        OrgReads,
        Orgs,
        OrgSecrets,
        Plans,
    )
    from svc.runs import RunAnalytics, Runs
    from svc.runtime import (
        McpService,
        Outreach,
        RunDetail,
        RunService,
        RuntimeReads,
        RunWatch,
        Schedules,
        SecurityLog,
    )
    from svc.templates import Definitions, Portability, Templates

    plugins = plugins if plugins is not None else Plugins(settings.disabled_plugins)
    mailer = Mailer(store, settings.smtp_url, settings.mail_from)
    # What a package asks of a package above it, each answered by the owner of the records
    # (docs/architecture.md, "Who owns which collection"): handed in, never imported.
    org_reads = OrgReads(store, vault)
    install_reads = InstallReads(store)
    runtime_reads = RuntimeReads(store)
    accounts = Accounts(store, settings.password_cost)
    key_cache: TTLCache[str, Principal] = TTLCache()
    credentials = Credentials(
        store, accounts, settings.app_api_keys, key_cache, installs=install_reads, orgs=org_reads
    )
    tokenless = frozenset(p.id for p in plugins.platforms() if not p.traits.reports_tokens)
    managed = frozenset(p.id for p in plugins.platforms() if p.traits.managed)
    runs = Runs(store, tokenless, managed, installs=install_reads, runtime=runtime_reads)
    audit = AuditLog(store)
    org_access = OrgAccess(store, accounts)
    governance = Governance(store, org_access, audit, mailer, settings.base_url)
    installs = Installs(
        store,
        vault,
        plugins,
        credentials,
        settings,
        runs,
        governance,
        orgs=org_reads,
        runtime=runtime_reads,
        payments=PaymentReads(store),
    )
    upgrades = Upgrades(store, installs, mailer, governance)
    outreach = Outreach(store, installs)
    api_keys = ApiKeys(store, vault, key_cache, installs.deployer_may_reach)
    llm = LLM(plugins, settings, partial(write_metrics, store))
    # MCP (issue 32): the catalogue, consent, approvals and test chats' connections.
    mcp = McpService(store, llm, settings.judge_model, settings.mcp_servers, settings.egress_allow_private)
    invitations = Invitations(store, org_access, audit, mailer, settings.base_url)
    approvals = Approvals(store, org_access, audit, mailer, governance, installs, upgrades)
    org_secrets = OrgSecrets(store, org_access, audit, vault)
    plans = Plans(store, org_access, audit, approvals)
    provider = (
        PaymentProvider(settings.stripe_api_key, settings.stripe_api_base, settings.stripe_webhook_secret)
        if settings.stripe_api_key
        else None
    )
    charges = Charges(store, mailer, provider, installs)
    org_billing = OrgBilling(store, org_access, audit, plans, provider, settings)
    multiplier = settings.rate_limit_multiplier
    spend_caps = SpendCaps(store, mailer)
    run_service = RunService(
        store, installs, runtime, outreach, admission=spend_caps.admit, wait_s=settings.run_wait_seconds
    )
    # Evals (issue 36): the suite runner is the publish gate, so it is built before the templates.
    limits = EvalLimits(settings.judge_model, settings.eval_monthly_runs, settings.eval_concurrency)
    suites = SuiteRunner(store, run_service, installs, llm, limits, governance)
    templates = Templates(store, mailer, suites.gate, installs=install_reads, orgs=org_reads)
    callbacks = CallbackDelivery(store, vault, settings.egress_allow_private, settings.callback_max_attempts)
    return Services(
        settings=settings,
        store=store,
        vault=vault,
        runtime=runtime,
        plugins=plugins,
        mailer=mailer,
        accounts=accounts,
        user_admin=UserAdmin(store, accounts, key_cache, orgs=org_reads),
        keys=api_keys,
        credentials=credentials,
        rate_limiter=RateLimiter(store, multiplier) if multiplier is not None else None,
        templates=templates,
        definitions=Definitions(settings.configured_providers),
        portability=Portability(store, templates),
        runs=runs,
        run_analytics=RunAnalytics(store, installs=install_reads),
        run_poller=RunPoller(store, vault, plugins, runs, settings),
        installs=installs,
        upgrades=upgrades,
        auto_upgrades=AutoUpgrades(store, upgrades, settings.base_url),
        llm=llm,
        run_service=run_service,
        install_runner=install_runner(settings, store, vault, llm, mailer, callbacks, spend_caps.admit, mcp),
        security_log=SecurityLog(store),
        schedules=Schedules(store, installs, runtime),
        outreach=outreach,
        authoring=Authoring(llm, mcp),
        org_access=org_access,
        orgs=Orgs(
            store, org_access, audit, api_keys, invitations, approvals, org_secrets, templates, installs
        ),
        org_invitations=invitations,
        org_keys=OrgKeys(org_access, audit, api_keys),
        org_approvals=approvals,
        org_plans=plans,
        org_secrets=org_secrets,
        usage=UsageReport(store),
        charges=charges,
        payouts=Payouts(store, accounts, charges, provider, org_billing.handle_event),
        org_billing=org_billing,
        # the trace link (tracing, #33)
        run_detail=RunDetail(store, run_cost, settings.tracing.viewer_url, orgs=org_reads),
        run_watch=RunWatch(store, runtime),
        callbacks=callbacks,
        spend_caps=spend_caps,
        mcp=mcp,
        evals=Evals(store, templates, suites),
    )


def install_runner(
    settings: Settings,
    store: Store,
    vault: Vault,
    llm: LLM,
    mailer: Mailer,
    callbacks: CallbackDelivery,
    admission: Admission | None,
    mcp: McpService | None = None,
) -> InstallRunner:
    """What runs and settles an install's runs, with the deployment's settings (the same for an
    install's actor, the API's sweeper and the tests)."""
    from svc.billing import run_charge
    from svc.orgs import OrgReads

    crash = CrashPoints(settings.crash_points, settings.data_dir / "crash-points")  # a test hook
    limits = RunLimits(settings.judge_model, settings.egress_allow_private, settings.run_max_resumes, crash)
    return InstallRunner(
        store,
        vault,
        llm,
        Settlement(store, callbacks, llm.count),
        limits,
        mailer,
        admission,
        mcp,
        costing=partial(run_charge, store),  # the billed amount on a run's span (tracing, #33)
        orgs=OrgReads(store, vault),  # an org install's secrets
    )


def dropped_spans(store: Store, process: str) -> Callable[[int], Coroutine[Any, Any, None]]:
    """What a process's tracing calls when it loses spans (plugins/tracing/sdk.py): the deployment's
    `svc_trace_spans_dropped_total{process}` in /metrics (tracing, #33)."""

    async def report(n: int) -> None:
        dropped = counter_increment("trace_spans_dropped", {"process": process}, n)
        await write_metrics(store, [dropped])

    return report


# What `build_host` and `install_runner` import when they are called rather than with this module
# (an install actor imports it, and a spare need not pay for them before it serves an install).
HOST_IMPORTS = ("svc.billing", "svc.orgs")


def preload_host() -> None:
    """Import what building a host imports (a spare does it while it waits, so the install it
    adopts does not wait for it: about 90 ms of CPU)."""
    for name in HOST_IMPORTS:
        importlib.import_module(name)


def build_host(settings: Settings, store: Store, vault: Vault, install_id: str) -> InstallHost:
    """The home of one install's runs, for its actor: models only (no platform drivers, whose
    imports an actor need not pay for), the store, the vault, mail and the spend caps."""
    from svc.billing import SpendCaps
    from svc.runtime import McpService

    plugins = Plugins(disabled=settings.disabled_plugins, builtins=PROVIDER_BUILTINS)
    mailer = Mailer(store, settings.smtp_url, settings.mail_from)
    callbacks = CallbackDelivery(store, vault, settings.egress_allow_private, settings.callback_max_attempts)
    llm = LLM(plugins, settings, BufferedMetrics(store))  # metrics once a second, not per call
    # MCP (issue 32): tools of the team's MCP servers, connections pooled per actor.
    mcp = McpService(store, llm, settings.judge_model, settings.mcp_servers, settings.egress_allow_private)
    runner = install_runner(
        settings, store, vault, llm, mailer, callbacks, SpendCaps(store, mailer).admit, mcp
    )
    return InstallHost(
        install_id, store, runner, max_runs=settings.actor_max_runs, max_resumes=settings.run_max_resumes
    )
