"""Connects the process to Ray: a local instance, or a cluster at SVC_RAY_ADDRESS.

Every `ray.*` call of the API process goes through `RayRuntime`, so the rest of
the code sees only the `svc.ports.Runtime` protocol. Workers get the database
URI in their environment, so actors reach the same MongoDB as the API.
"""

from __future__ import annotations

import asyncio
import logging

import ray

log = logging.getLogger(__name__)

PING_TIMEOUT_S = 5.0


class RayRuntime:
    """Owns this process's Ray connection (and the local Ray it may have started)."""

    def __init__(self, address: str | None, mongodb_uri: str) -> None:
        self.address = address
        self.mongodb_uri = mongodb_uri
        self._owned = False

    def start(self) -> None:
        """Connect (joining a Ray this process already has, if any).

        Called on the main thread: a local Ray's processes are tied to the thread
        that starts them and die with it.
        """
        if ray.is_initialized():
            log.info("using the Ray connection this process already has")
            return
        ray.init(
            address=self.address,
            namespace="svc",
            include_dashboard=False,
            log_to_driver=False,
            configure_logging=False,
            runtime_env={"env_vars": {"SVC_MONGODB_URI": self.mongodb_uri}},
        )
        self._owned = True
        log.info("connected to Ray (%s)", self.address or "local instance")

    async def ping(self) -> bool:
        """True when the Ray control plane answers within PING_TIMEOUT_S."""
        if not ray.is_initialized():
            return False
        try:
            resources = await asyncio.wait_for(asyncio.to_thread(ray.cluster_resources), PING_TIMEOUT_S)
        except Exception as exc:  # any failure means "not reachable" to a health check
            log.warning("Ray ping failed: %s", type(exc).__name__)
            return False
        return bool(resources)

    def stop(self) -> None:
        """Disconnect, stopping the local Ray if this object started it."""
        if self._owned and ray.is_initialized():
            ray.shutdown()
        self._owned = False
