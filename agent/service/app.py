"""FastAPI application factory."""

from __future__ import annotations

import logging

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse

from agent.errors import FerryAgentError
from agent.service.deps import Jobs, Settings, settings_from_env
from agent.service.routes import router
from agent.service.schemas import Health

logger = logging.getLogger(__name__)


def create_app(settings: Settings | None = None) -> FastAPI:
    app = FastAPI(title="Ferry", description="Migrate PyTorch code from CUDA to tpx", version="0.1.0")
    app.state.settings = settings or settings_from_env()
    app.state.jobs = Jobs()
    app.include_router(router)

    @app.exception_handler(FerryAgentError)
    async def store_unavailable(request: Request, exc: FerryAgentError) -> JSONResponse:
        # the checkpoint store (Postgres / SQLite) failed under a request: say why, not a bare 500
        logger.error("%s %s: %s", request.method, request.url.path, exc)
        return JSONResponse(status_code=503, content={"detail": str(exc)})

    @app.get("/healthz", tags=["meta"], response_model=Health)
    def healthz() -> Health:
        return Health()

    return app
