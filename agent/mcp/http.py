"""``/mcp`` over streamable HTTP: mounted in ``ferry serve`` or served alone by ``ferry mcp --http``.

Every request needs a bearer token of the service's (FERRY_API_TOKENS) when the server has any; without
one it is answered 401 before the MCP layer sees it, and each tool call checks the token again to know
its owner. A server without tokens listens on loopback only (as ``ferry serve``) and everyone there is
the local user. Host and Origin are checked by the service's same-site guard.
"""

from __future__ import annotations

import json
import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from mcp.server.transport_security import TransportSecuritySettings
from starlette.applications import Starlette
from starlette.routing import Route
from starlette.types import ASGIApp, Receive, Scope, Send

from agent.mcp.context import McpLimits, Server
from agent.mcp.server import build
from agent.service.app import service_core
from agent.service.deps import BadToken, owner_for
from agent.service.origins import SameSite
from agent.service.settings import ServiceSettings
from agent.service.store import SessionStore
from agent.service.workers import Workers

logger = logging.getLogger(__name__)
PATH = "/mcp"


async def _answer(send: Send, code: int, detail: str, headers: list[tuple[bytes, bytes]] | None = None) -> None:
    body = json.dumps({"detail": detail}).encode()
    await send({"type": "http.response.start", "status": code,
                "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode()),
                            *(headers or [])]})
    await send({"type": "http.response.body", "body": body})


class Endpoint:
    """The ASGI app at /mcp: the bearer check, then the SDK's streamable HTTP app once the service runs."""

    def __init__(self, settings: ServiceSettings, limits: McpLimits) -> None:
        self.settings, self.limits = settings, limits
        self.inner: ASGIApp | None = None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope.get("headers") or []}
        try:
            owner_for(self.settings, headers.get("authorization"))
        except BadToken as exc:
            await _answer(send, 401, str(exc), [(b"www-authenticate", b"Bearer")])
            return
        if self.inner is None:
            await _answer(send, 503, "the MCP endpoint is starting or stopping; try again in a moment")
            return
        await self.inner(scope, receive, send)

    @asynccontextmanager
    async def running(self, store: SessionStore, workers: Workers) -> AsyncIterator[None]:
        """The MCP server over the service's store and workers, for as long as the service runs."""
        server = build(Server(settings=self.settings, store=store, workers=workers, transport="http",
                              limits=self.limits))
        # Host and Origin are the service's same-site guard's (it knows --allowed-host); the SDK's own
        # check would refuse the names the operator allowed.
        app = server.streamable_http_app(streamable_http_path=PATH, host=self.settings.bind_host,
                                         transport_security=TransportSecuritySettings(
                                             enable_dns_rebinding_protection=False))
        async with server.session_manager.run():
            self.inner = app
            try:
                yield
            finally:
                self.inner = None


def service_with_mcp(settings: ServiceSettings, limits: McpLimits | None = None) -> Any:
    """``ferry serve``'s app with /mcp on it, over the same store and workers as the sessions API."""
    from agent.service.app import create_app

    endpoint = Endpoint(settings, limits or McpLimits())
    app = create_app(settings, extras=[lambda running: endpoint.running(running.state.store, running.state.workers)])
    # first: the chat page is mounted at / and would answer /mcp otherwise
    app.router.routes.insert(0, Route(PATH, endpoint=endpoint, methods=["GET", "POST", "DELETE"]))
    return app


def standalone(settings: ServiceSettings, limits: McpLimits | None = None) -> Starlette:
    """Only /mcp, over the service's store and workers in ``settings.data_dir`` (``ferry mcp --http``)."""
    endpoint = Endpoint(settings, limits or McpLimits())

    @asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        with service_core(settings) as (store, workers):
            async with endpoint.running(store, workers):
                yield

    app = Starlette(routes=[Route(PATH, endpoint=endpoint, methods=["GET", "POST", "DELETE"])], lifespan=lifespan)
    app.add_middleware(SameSite, allowed=settings.allowed_hosts, bound=settings.bind_host, tokens=bool(settings.tokens))
    return app
