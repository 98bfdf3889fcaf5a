"""Dependencies: settings, bearer-token auth, the migration runner."""

from __future__ import annotations

import logging
import os
import secrets
import threading
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Annotated, Any

from fastapi import Depends, Header, HTTPException, Request, status

from agent.runs import RunScheduler

logger = logging.getLogger(__name__)

TOKEN_ENV = "FERRY_API_TOKEN"


@dataclass
class Settings:
    state_dir: str
    token: str | None = None
    # interpreters a request may name in ``python`` (``ferry serve --python PATH``); the server's own always
    pythons: tuple[str, ...] = ()


@dataclass
class Jobs:
    """Migrations running in the background (the graph itself keeps all state in the checkpointer)."""

    pool: ThreadPoolExecutor = field(default_factory=lambda: ThreadPoolExecutor(max_workers=2))
    futures: dict[str, Future[Any]] = field(default_factory=dict)
    errors: dict[str, str] = field(default_factory=dict)
    lock: threading.Lock = field(default_factory=threading.Lock)
    runs: RunScheduler = field(default_factory=RunScheduler)  # the background runs of every migration here

    def submit(self, mid: str, fn: Callable[[], Any]) -> None:
        """Run ``fn`` in the background; 409 when this migration is already running."""

        def job() -> Any:
            try:
                return fn()
            except BaseException as exc:  # recorded before the future completes, so status never misses it
                logger.exception("migration %s failed", mid)
                self.errors[mid] = f"{type(exc).__name__}: {exc}"
                raise

        with self.lock:
            running = self.futures.get(mid)
            if running is not None and not running.done():
                raise HTTPException(status.HTTP_409_CONFLICT, f"migration {mid} is already running")
            self.errors.pop(mid, None)
            self.futures[mid] = self.pool.submit(job)

    def running(self, mid: str) -> bool:
        fut = self.futures.get(mid)
        return fut is not None and not fut.done()


def get_settings(request: Request) -> Settings:
    settings: Settings = request.app.state.settings
    return settings


def get_jobs(request: Request) -> Jobs:
    jobs: Jobs = request.app.state.jobs
    return jobs


def require_token(settings: Annotated[Settings, Depends(get_settings)],
                  authorization: Annotated[str | None, Header()] = None) -> None:
    if not settings.token:
        return
    expected = f"Bearer {settings.token}"
    if authorization is None or not secrets.compare_digest(authorization, expected):
        raise HTTPException(status.HTTP_401_UNAUTHORIZED, "missing or wrong bearer token (FERRY_API_TOKEN)",
                            headers={"WWW-Authenticate": "Bearer"})


SettingsDep = Annotated[Settings, Depends(get_settings)]
JobsDep = Annotated[Jobs, Depends(get_jobs)]
Authorized = Depends(require_token)


def settings_from_env(state_dir: str | None = None, pythons: tuple[str, ...] = ()) -> Settings:
    from agent.materialise import state_dir as resolve

    return Settings(state_dir=str(resolve(state_dir or os.environ.get("FERRY_STATE_DIR"))),
                    token=os.environ.get(TOKEN_ENV) or None, pythons=pythons)
