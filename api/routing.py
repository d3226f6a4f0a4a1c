"""The route table: every route with the auth code (spec legend) it requires.

Handlers are declared with `@routes.get(path, auth=..., body=Model)`; the app
registers each behind a guard that resolves the credential first and, when the
route declares a body model, validates the body and passes it to the handler.
The table also feeds the OpenAPI document and the tests that walk every route.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Literal

from aiohttp import web
from pydantic import BaseModel

AuthCode = Literal["P", "K", "S", "K/S", "I", "T", "AK"]
Handler = Callable[..., Awaitable[web.StreamResponse]]


@dataclass(frozen=True)
class Route:
    """One method and path, its handler, its auth code and what it takes and gives."""

    method: str
    path: str
    handler: Handler
    auth: AuthCode
    body: type[BaseModel] | None = None
    query: type[BaseModel] | None = None
    response: type[BaseModel] | None = None
    status: int = 200
    optional_key: bool = False
    # An AK route that also takes a personal or org key (whoami: svc installs link their key).
    key_fallback: bool = False

    @property
    def summary(self) -> str:
        """The first line of the handler's docstring."""
        return (self.handler.__doc__ or "").strip().splitlines()[0] if self.handler.__doc__ else ""


class RouteTable(list[Route]):
    """Collects a module's routes through decorators."""

    def add(self, method: str, path: str, auth: AuthCode, **options: Any) -> Callable[[Handler], Handler]:
        """Register the decorated handler."""

        def decorate(handler: Handler) -> Handler:
            self.append(Route(method, path, handler, auth, **options))
            return handler

        return decorate

    def get(self, path: str, *, auth: AuthCode, **options: Any) -> Callable[[Handler], Handler]:
        """A GET route."""
        return self.add("GET", path, auth, **options)

    def post(self, path: str, *, auth: AuthCode, **options: Any) -> Callable[[Handler], Handler]:
        """A POST route."""
        return self.add("POST", path, auth, **options)

    def patch(self, path: str, *, auth: AuthCode, **options: Any) -> Callable[[Handler], Handler]:
        """A PATCH route."""
        return self.add("PATCH", path, auth, **options)

    def delete(self, path: str, *, auth: AuthCode, **options: Any) -> Callable[[Handler], Handler]:
        """A DELETE route."""
        return self.add("DELETE", path, auth, **options)
