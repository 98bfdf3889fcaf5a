"""FastAPI application factory."""

from __future__ import annotations

import logging

from fastapi import FastAPI

from agent.service.deps import Jobs, Settings, settings_from_env
from agent.service.routes import router
from agent.service.schemas import Health

logger = logging.getLogger(__name__)


def create_app(settings: Settings | None = None) -> FastAPI:
    app = FastAPI(title="Ferry", description="Migrate PyTorch code from CUDA to tpx", version="0.1.0")
    app.state.settings = settings or settings_from_env()
    app.state.jobs = Jobs()
    app.include_router(router)

    @app.get("/healthz", tags=["meta"], response_model=Health)
    def healthz() -> Health:
        return Health()

    return app
