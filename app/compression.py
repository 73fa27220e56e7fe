"""Response compression where it pays: gzip (level 1) for a client across a network, none for a
client on this machine.

Over loopback the bytes cost a copy, while gzip costs the server's CPU to compress and the
client's to unzip: a 100,000-point MLflow history (7.7 MB of JSON, 1.6 MB gzipped) took ~33 ms
to compress and ~15 ms to unzip on this box, against a few ms to send it raw (issue 29). Jobs on
the GPU box, their MLflow clients, and a browser on the box itself are such clients.

A request is taken as local only when its peer is a loopback address, no forwarding header came
with it (a reverse proxy on the same host serves remote clients: Caddy and Traefik add
X-Forwarded-For, others Forwarded, X-Real-IP or Via) and no trusted proxy is configured
(``trusted_proxies``: the server is behind one, whose peer is loopback for every client; the
forwarded client, once uvicorn's ProxyHeadersMiddleware has set it, is what counts then anyway,
but a proxy that forwards no address must not turn compression off for everyone).
"""

from __future__ import annotations

import ipaddress

from starlette.middleware.gzip import GZipMiddleware
from starlette.types import ASGIApp, Receive, Scope, Send

_FORWARDING_HEADERS = frozenset({b"x-forwarded-for", b"forwarded", b"x-real-ip", b"via"})


class NetworkGZipMiddleware:
    """Starlette's GZipMiddleware for every request but a local one (see the module)."""

    def __init__(
        self, app: ASGIApp, *, minimum_size: int, compresslevel: int, behind_proxy: bool
    ) -> None:
        self.app = app
        self.gzip = GZipMiddleware(app, minimum_size=minimum_size, compresslevel=compresslevel)
        self.behind_proxy = behind_proxy

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and not self.behind_proxy and is_local(scope):
            await self.app(scope, receive, send)
        else:
            await self.gzip(scope, receive, send)


def is_local(scope: Scope) -> bool:
    """Whether the request's peer is a loopback address with no forwarding header."""
    client = scope.get("client")
    if not client:
        return False
    try:
        loopback = ipaddress.ip_address(client[0]).is_loopback
    except ValueError:  # not an address (a test client's name, a Unix socket's path)
        return False
    return loopback and not any(name in _FORWARDING_HEADERS for name, _ in scope["headers"])
