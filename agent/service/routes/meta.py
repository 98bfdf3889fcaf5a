"""Liveness and readiness."""

from __future__ import annotations

from fastapi import APIRouter, Response, status

from agent.service.deps import SettingsDep, StoreDep
from agent.service.schemas import Health, Ready

router = APIRouter(tags=["meta"])


@router.get("/healthz", response_model=Health)
def healthz() -> Health:
    """The process answers."""
    return Health()


@router.get("/readyz", response_model=Ready, responses={503: {"model": Ready}})
def readyz(response: Response, settings: SettingsDep, store: StoreDep) -> Ready:
    """The session store, the checkpoint store and the sandbox work."""
    from agent.checkpoints import checkpointer, describe_store
    from sandbox.isolation import SandboxUnavailable, choose

    checks: dict[str, str] = {}
    try:
        store.ping()
        with checkpointer(settings.data_dir):
            pass
        checks["database"] = f"ok: sessions in {store.path.name}, checkpoints in {describe_store(settings.data_dir)}"
    except Exception as exc:
        checks["database"] = f"fail: {type(exc).__name__}: {str(exc)[:300]}"
    try:
        checks["sandbox"] = f"ok: {choose().describe()}"
    except SandboxUnavailable as exc:
        checks["sandbox"] = f"fail: {exc}"
    ok = all(v.startswith("ok") for v in checks.values())
    if not ok:
        response.status_code = status.HTTP_503_SERVICE_UNAVAILABLE
    return Ready(status="ok" if ok else "fail", checks=checks)
