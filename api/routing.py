"""The route table: every route with the auth code (spec legend) it requires.

Handlers are declared with `@routes.get(path, auth=...)`; the app registers each
behind a guard that resolves the credential first, and keeps the table so that
tests can walk it.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Literal

from aiohttp import web

AuthCode = Literal["P", "K", "S", "K/S", "I", "T", "AK"]
Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


@dataclass(frozen=True)
class Route:
    """One method and path, its handler and its auth code."""

    method: str
    path: str
    handler: Handler
    auth: AuthCode


class RouteTable(list[Route]):
    """Collects a module's routes through decorators."""

    def add(self, method: str, path: str, auth: AuthCode) -> Callable[[Handler], Handler]:
        """Register the decorated handler."""

        def decorate(handler: Handler) -> Handler:
            self.append(Route(method, path, handler, auth))
            return handler

        return decorate

    def get(self, path: str, *, auth: AuthCode) -> Callable[[Handler], Handler]:
        """A GET route."""
        return self.add("GET", path, auth)

    def post(self, path: str, *, auth: AuthCode) -> Callable[[Handler], Handler]:
        """A POST route."""
        return self.add("POST", path, auth)

    def patch(self, path: str, *, auth: AuthCode) -> Callable[[Handler], Handler]:
        """A PATCH route."""
        return self.add("PATCH", path, auth)

    def delete(self, path: str, *, auth: AuthCode) -> Callable[[Handler], Handler]:
        """A DELETE route."""
        return self.add("DELETE", path, auth)
