"""The domain services, built once per process from the store, the vault and the settings."""

from __future__ import annotations

from dataclasses import dataclass

from config.settings import Settings
from svc.accounts import Accounts
from svc.credentials import Credentials
from svc.keys import ApiKeys
from svc.ports import Runtime
from svc.ratelimit import RateLimiter
from svc.store import Store
from svc.vault import Vault


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

    @classmethod
    def build(cls, settings: Settings, store: Store, vault: Vault, runtime: Runtime | None) -> Services:
        """Wire the services for one process."""
        accounts = Accounts(store)
        multiplier = settings.rate_limit_multiplier
        return cls(
            settings=settings,
            store=store,
            vault=vault,
            runtime=runtime,
            accounts=accounts,
            keys=ApiKeys(store, vault),
            credentials=Credentials(store, accounts, settings.app_api_keys),
            rate_limiter=RateLimiter(store, multiplier) if multiplier is not None else None,
        )

    async def health(self) -> dict[str, bool]:
        """Whether the database and the actor runtime answer."""
        runtime_ok = await self.runtime.ping() if self.runtime is not None else False
        return {"database": await self.store.ping(), "ray": runtime_ok}
