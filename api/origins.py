"""Which origin may change state with the session cookie: the one rule behind the dashboard's
and the JSON API's Origin checks, and the session cookie's `Secure` flag.

With SVC_PUBLIC_URL set, browsers reach the service at that origin and at no other, so a
request is same-origin exactly when its `Origin` is that one.

With it unset (a service on a laptop or a LAN: `make serve`, `make serve PORT=9000`), the
service has no one address: a person opens it at http://127.0.0.1:9000, http://localhost:8080
or a LAN address, and each must work. A request is then same-origin when its `Origin` is the
request's own origin (its scheme and `Host`), which a page on another site cannot send. One
trap remains: a page on an attacker's domain whose name is re-pointed at this machine (DNS
rebinding) is same-origin with itself. So the request's own origin is trusted only when its
host cannot be such a name: an IP address, `localhost` (or a name under `.localhost`), or
this machine's own host name. Any other name needs SVC_PUBLIC_URL, and the refusal says so.
"""

from __future__ import annotations

import ipaddress
import socket
from functools import cache
from urllib.parse import urlsplit

from aiohttp import web

from api.context import services

DEFAULT_PORTS = {"http": 80, "https": 443}
Origin = tuple[str, str, int]


def parsed(origin: str) -> Origin | None:
    """An origin as (scheme, host, port), the default port filled in; None when it is not one."""
    try:
        parts = urlsplit(origin)
        port = parts.port
    except ValueError:
        return None
    if parts.scheme not in DEFAULT_PORTS or not parts.hostname:
        return None
    return parts.scheme, parts.hostname.lower(), port or DEFAULT_PORTS[parts.scheme]


def own_origin(request: web.Request) -> str:
    """The origin the request was sent to, as a browser on that address names it."""
    return f"{request.scheme}://{request.host}"


@cache
def machine_names() -> frozenset[str]:
    """This machine's own host name (and its mDNS form), which no other site can re-point."""
    name = socket.gethostname().lower().rstrip(".")
    return frozenset({name, f"{name}.local"}) if name else frozenset()


def local_host(host: str) -> bool:
    """A host that no other site can make its own: an IP address, localhost, this machine."""
    try:
        ipaddress.ip_address(host.strip("[]"))
        return True
    except ValueError:
        pass
    return host in ("localhost", *machine_names()) or host.endswith(".localhost")


def same_origin(request: web.Request, origin: str | None) -> bool:
    """Whether a state-changing request with this `Origin` comes from the service's own pages."""
    if origin is None:
        return False
    offered = parsed(origin)
    public = services(request).settings.public_origin
    if public is not None:
        return offered is not None and offered == parsed(public)
    own = parsed(own_origin(request))
    return offered is not None and offered == own and local_host(offered[1])


def refusal(request: web.Request, origin: str | None) -> str:
    """Why `same_origin` said no, in words a person can act on."""
    if origin is None:
        return "Request refused: it carries no Origin header (forms are taken from this service's pages only)"
    offered = parsed(origin)
    own = parsed(own_origin(request))
    if services(request).settings.public_url is None and offered is not None and offered == own:
        return (
            f"Request refused: {offered[1]} is not a local address; to use the service at "
            f"{own_origin(request)}, set SVC_PUBLIC_URL to it"
        )
    return "Cross-origin request refused"


def cookie_secure(request: web.Request) -> bool:
    """Whether the session cookie is marked Secure: the public URL is https, or (unset) the
    request itself came over https."""
    settings = services(request).settings
    return settings.cookie_secure if settings.public_url is not None else request.secure


__all__ = ["cookie_secure", "own_origin", "refusal", "same_origin"]
