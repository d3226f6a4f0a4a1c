"""The domain services, built once per process from the store, the vault and the settings."""

from __future__ import annotations

from dataclasses import dataclass

from config.settings import Settings
from plugins.manager import Plugins
from svc.authoring import Authoring
from svc.billing import Charges, OrgBilling, PaymentProvider, Payouts, UsageReport
from svc.core import Mailer, Runtime, Store, TTLCache, Vault
from svc.identity import Accounts, ApiKeys, Credentials, Principal, RateLimiter
from svc.installs import Installs
from svc.orgs import Orgs
from svc.runs import RunAnalytics, RunPoller, Runs
from svc.runtime import LLM, Outreach, RunService, Schedules, SecurityLog
from svc.templates import Templates


@dataclass
class Services:
    """Every domain service, wired together."""

    settings: Settings
    store: Store
    vault: Vault
    runtime: Runtime | None
    accounts: Accounts
    keys: ApiKeys
    credentials: Credentials
    rate_limiter: RateLimiter | None
    mailer: Mailer
    templates: Templates
    plugins: Plugins
    installs: Installs
    llm: LLM
    run_service: RunService
    security_log: SecurityLog
    schedules: Schedules
    outreach: Outreach
    authoring: Authoring
    usage: UsageReport
    charges: Charges
    payouts: Payouts
    orgs: Orgs
    org_billing: OrgBilling
    runs: Runs
    run_analytics: RunAnalytics
    run_poller: RunPoller

    @classmethod
    def build(
        cls, settings: Settings, store: Store, vault: Vault, runtime: Runtime | None, plugins: Plugins
    ) -> Services:
        """Wire the services for one process."""
        accounts = Accounts(store)
        key_cache: TTLCache[str, Principal] = TTLCache()
        multiplier = settings.rate_limit_multiplier
        mailer = Mailer(store, settings.smtp_url, settings.mail_from)
        credentials = Credentials(store, accounts, settings.app_api_keys, key_cache)
        runs = Runs(store)
        installs = Installs(store, vault, plugins, credentials, key_cache, settings, runs)
        llm = LLM(plugins, settings, store)
        orgs = Orgs(store, accounts, mailer, vault, key_cache, settings, installs)
        installs.governance = orgs
        provider = (
            PaymentProvider(settings.stripe_api_key, settings.stripe_api_base, settings.stripe_webhook_secret)
            if settings.stripe_api_key
            else None
        )
        charges = Charges(store, mailer, provider)
        payouts = Payouts(store, charges, provider)
        org_billing = OrgBilling(store, orgs, provider, settings)
        payouts.subscription_handler = org_billing.handle_event
        return cls(
            settings=settings,
            store=store,
            vault=vault,
            runtime=runtime,
            accounts=accounts,
            keys=ApiKeys(store, vault, key_cache),
            credentials=credentials,
            rate_limiter=RateLimiter(store, multiplier) if multiplier is not None else None,
            mailer=mailer,
            templates=Templates(store, mailer),
            plugins=plugins,
            installs=installs,
            llm=llm,
            run_service=RunService(store, installs, runtime),
            security_log=SecurityLog(store),
            schedules=Schedules(store, installs),
            outreach=Outreach(store, installs),
            authoring=Authoring(llm),
            usage=UsageReport(store),
            charges=charges,
            payouts=payouts,
            orgs=orgs,
            org_billing=org_billing,
            runs=runs,
            run_analytics=RunAnalytics(store),
            run_poller=RunPoller(store, vault, plugins, runs, settings),
        )

    async def close(self) -> None:
        """Write out what is held in memory (rate-limit counts) before shut-down."""
        if self.rate_limiter is not None:
            await self.rate_limiter.close()

    async def health(self) -> dict[str, bool]:
        """Whether the database and the actor runtime answer."""
        runtime_ok = await self.runtime.ping() if self.runtime is not None else False
        return {"database": await self.store.ping(), "ray": runtime_ok}
