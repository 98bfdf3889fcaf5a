"""FastAPI application factory: the /v1 routers over the store and the workers."""

from __future__ import annotations

import logging
import os
from collections.abc import AsyncIterator, Callable, Iterator, Sequence
from contextlib import AbstractAsyncContextManager, AsyncExitStack, asynccontextmanager, contextmanager
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse

from agent.errors import FerryAgentError
from agent.prbot.jobs import GitHubJobs
from agent.service import leftovers
from agent.service.body_limits import BodyLimit
from agent.service.lock import hold_data_dir
from agent.service.origins import SameSite
from agent.service.page import mount_page
from agent.service.routes import events, github, messages, meta, outputs, sessions
from agent.service.settings import ServiceSettings
from agent.service.store import SessionStore
from agent.service.workers import Workers

logger = logging.getLogger(__name__)
MAX_SHOWN_INPUT = 200


def _safe_errors(exc: RequestValidationError) -> list[dict[str, Any]]:
    """FastAPI's error list with what the client sent cut short (a binary or huge body never reaches the
    encoder or the logs whole)."""
    out = []
    for err in exc.errors():
        item = {"type": err.get("type"), "loc": list(err.get("loc", ())), "msg": str(err.get("msg", ""))[:1000]}
        value = err.get("input")
        if isinstance(value, str | int | float | bool) and len(str(value)) <= MAX_SHOWN_INPUT \
                and str(value).encode("utf-8", "surrogatepass").decode("utf-8", "ignore") == str(value):
            item["input"] = value  # short, plain text only: never bytes, never lone surrogates
        out.append(item)
    return out


def github_jobs(settings: ServiceSettings) -> GitHubJobs | None:
    if settings.github is None:
        return None
    from agent.prbot.github.client import GitHubClient

    return GitHubJobs(settings.data_dir, settings.github, GitHubClient(settings.github))


def open_store(settings: ServiceSettings) -> SessionStore:
    """The sessions' store: Postgres when ``database_url`` names one (shared by every server given it),
    else SQLite in the data dir."""
    if settings.database_url:
        from agent.service.pg_store import PgSessionStore

        return PgSessionStore(settings.database_url, settings.host_id, settings.lease_s)
    return SessionStore(settings.data_dir / "service.db")


@contextmanager
def service_core(settings: ServiceSettings) -> Iterator[tuple[SessionStore, Workers]]:
    """The data dir held (SQLite: one server; Postgres: the data dir is shared by the servers of one
    database, and only this host's own lock file is taken), its store open (left-overs of a dead server
    swept) and the workers started; all stopped and released on exit. The HTTP app's lifespan and ``ferry
    mcp`` both run over this."""
    fd = hold_data_dir(settings.data_dir, settings.host_id if settings.database_url else None)
    try:
        store = open_store(settings)
        try:
            leftovers.sweep(settings.data_dir, store, shared=settings.database_url is not None)
            workers = Workers(settings, store)
            workers.start()
            try:
                yield store, workers
            finally:
                workers.stop()
        finally:
            store.close()
    finally:
        os.close(fd)


Extra = Callable[[FastAPI], AbstractAsyncContextManager[None]]


def create_app(settings: ServiceSettings, extras: Sequence[Extra] = ()) -> FastAPI:
    """The service. ``extras``: what a front door above the service mounts on it (``ferry serve``'s MCP
    endpoint), each an async context entered once the store and workers run and left before they stop."""
    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        with service_core(settings) as (store, workers):
            app.state.store, app.state.workers = store, workers
            jobs = github_jobs(settings)
            app.state.github_jobs = jobs
            if jobs is not None:
                jobs.start()
            try:
                async with AsyncExitStack() as stack:
                    for extra in extras:
                        await stack.enter_async_context(extra(app))
                    yield
            finally:
                if jobs is not None:
                    jobs.stop()

    app = FastAPI(title="Ferry", description="Migrate PyTorch code from CUDA to tpx: chat-style sessions",
                  version="1.0.0", lifespan=lifespan, docs_url=None, redoc_url=None)
    app.state.settings = settings
    app.add_middleware(BodyLimit)
    # added last, so it runs first: a request for another host or from another site reaches nothing
    app.add_middleware(SameSite, allowed=settings.allowed_hosts, bound=settings.bind_host,
                       tokens=bool(settings.tokens))
    for module in (meta, sessions, events, messages, outputs, github):
        app.include_router(module.router)
    mount_page(app)

    @app.exception_handler(RequestValidationError)
    async def invalid(request: Request, exc: RequestValidationError) -> JSONResponse:
        return JSONResponse(status_code=422, content={"detail": _safe_errors(exc)})

    @app.exception_handler(FerryAgentError)
    async def store_unavailable(request: Request, exc: FerryAgentError) -> JSONResponse:
        # the checkpoint store (Postgres / SQLite) failed under a request: say why, not a bare 500
        logger.error("%s %s: %s", request.method, request.url.path, exc)
        return JSONResponse(status_code=503, content={"detail": str(exc)})

    return app
