"""Liveness and readiness: the anonymous routes say only ok or fail; the details need a token."""

from __future__ import annotations

from fastapi import APIRouter, Response, status

from agent.service.deps import OwnerDep, SettingsDep, StoreDep
from agent.service.schemas import Health, Ready
from agent.service.settings import ServiceSettings
from agent.service.store import SessionStore
from agent.settings import settings as ferry_settings

router = APIRouter(tags=["meta"])
MAX_DETAIL = 300


@router.get("/healthz", response_model=Health)
def healthz() -> Health:
    """The process answers."""
    return Health()


def _checks(settings: ServiceSettings, store: SessionStore) -> dict[str, str]:
    """Each check as 'ok: where' or 'fail: why', every credential of the database address hidden."""
    from agent.migration.facade import check_store
    from agent.redact import scrub
    from sandbox.isolation import SandboxUnavailable, choose

    checks: dict[str, str] = {}
    try:
        store.ping()
        where = check_store(settings.data_dir)
        checks["database"] = f"ok: sessions in {store.describe()}, checkpoints in {where}"
    except Exception as exc:  # any failure is a 'fail' here, never a 500
        why = scrub(f"{type(exc).__name__}: {' '.join(str(exc).split())}", ferry_settings().paths.database_url)
        checks["database"] = f"fail: {why[:MAX_DETAIL]}"
    try:
        checks["sandbox"] = f"ok: {choose().describe()}"
    except SandboxUnavailable as exc:
        checks["sandbox"] = f"fail: {str(exc)[:MAX_DETAIL]}"
    return checks


def _answer(response: Response, checks: dict[str, str]) -> Ready:
    ok = all(v.startswith("ok") for v in checks.values())
    if not ok:
        response.status_code = status.HTTP_503_SERVICE_UNAVAILABLE
    return Ready(status="ok" if ok else "fail", checks=checks)


@router.get("/readyz", response_model=Ready, responses={503: {"model": Ready}})
def readyz(response: Response, settings: SettingsDep, store: StoreDep) -> Ready:
    """The session store, the checkpoint store and the sandbox work: 'ok' or 'fail' per check, nothing
    more (no paths, no addresses, no error text: anyone may ask). GET /v1/ready, with a token, says why."""
    checks = _checks(settings, store)
    return _answer(response, {name: "ok" if v.startswith("ok") else "fail" for name, v in checks.items()})


@router.get("/v1/ready", response_model=Ready, responses={503: {"model": Ready}})
def ready_details(response: Response, owner: OwnerDep, settings: SettingsDep, store: StoreDep) -> Ready:
    """/readyz with each check's details ('ok: where' or 'fail: why'; database credentials hidden)."""
    return _answer(response, _checks(settings, store))
