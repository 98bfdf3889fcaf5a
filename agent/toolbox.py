"""Thin adapters from the agent to the deterministic tools (runner, scan/rewrite, parity, profile).

Each adapter imports its tool lazily and turns an ImportError into :class:`ToolUnavailable`, so a
node whose tool is missing ends the migration with the named status
``failed_tool_unavailable`` instead of pretending. Results are returned as plain JSON dicts
(``model_dump(mode="json")``) because that is what the checkpointed state holds.
"""

from __future__ import annotations

import importlib
import logging
import threading
from pathlib import Path
from typing import Any

from agent import background
from agent.errors import FerryAgentError, ToolUnavailable

logger = logging.getLogger(__name__)


def _import(module: str, what: str) -> Any:
    try:
        return importlib.import_module(module)
    except ImportError as exc:
        raise ToolUnavailable(
            f"the {what} tool ({module}) is not available in this installation: {exc}. "
            "Install Ferry with all its tools (scripts/setup) and run again."
        ) from exc


def _dump(obj: Any) -> dict[str, Any]:
    if hasattr(obj, "model_dump"):
        return obj.model_dump(mode="json")
    if isinstance(obj, dict):
        return obj
    raise TypeError(f"tool returned {type(obj).__name__}, expected a pydantic model")


# --- sandbox -------------------------------------------------------------------------------


def create_workspace(src: Path, root: Path) -> Path:
    """A private copy of ``src`` under ``root``; returns its directory."""
    mod = _import("sandbox.workspace", "workspace")
    root.mkdir(parents=True, exist_ok=True)
    ws = mod.create_workspace(Path(src), root=root)
    path = getattr(ws, "path", None) or getattr(ws, "root", None) or ws
    return Path(path)


# --- runner --------------------------------------------------------------------------------


def prewarm_runs(seed: int, env: dict[str, str] | None = None) -> bool:
    """Start the warm interpreter a migration's runs fork from (tools.runner.warm): the reference
    run and the tpx runs. False when warm starts are off or unavailable here (runs start cold)."""
    try:
        warm = _import("tools.runner.warm", "runner")
        started = bool(warm.prewarm(seed=seed, caller_env=env or {}))
        background.stop_runs_first()  # at exit: runs stop before their warm interpreter closes
        return started
    except (ToolUnavailable, OSError) as exc:
        logger.info("no warm interpreter for this migration's runs: %s", exc)
        return False


def run(
    path: Path,
    command: str,
    *,
    device: str,
    redirect_cuda: str | None,
    probe: bool,
    profile: bool,
    timeout_s: float,
    seed: int,
    artifacts_dir: Path,
    env: dict[str, str] | None = None,
    cancel: threading.Event | None = None,
    disk_limit_bytes: int | None = None,
) -> dict[str, Any]:
    """One sandboxed run (``disk_limit_bytes``: its disk cap in all; None: $FERRY_DISK_LIMIT or 4 GiB)."""
    models = _import("tools.runner.models", "runner")
    api = _import("tools.runner.api", "runner")
    artifacts_dir.mkdir(parents=True, exist_ok=True)
    req = models.RunRequest(
        path=Path(path),
        command=command,
        device=device,
        redirect_cuda=redirect_cuda,
        probe=probe,
        profile=profile,
        seed=seed,
        timeout_s=timeout_s,
        env=env or {},
        artifacts_dir=artifacts_dir,
        limits=models.RunLimits(disk_bytes=disk_limit_bytes),
    )
    logger.info("run %s on %s (redirect=%s probe=%s profile=%s)", command, device, redirect_cuda, probe, profile)
    return _dump(api.run(req, cancel=cancel))


# --- scan / rewrite ------------------------------------------------------------------------


def scan(path: Path) -> dict[str, Any]:
    api = _import("tools.scan.api", "scan")
    models = _import("tools.scan.models", "scan") if _has("tools.scan.models") else api
    return _dump(api.scan(models.ScanRequest(path=Path(path))))


def rewrite(path: Path, *, device: str, files: list[str] | None = None, lines: dict[str, list[int]] | None = None) -> dict[str, Any]:
    api = _import("tools.scan.api", "rewrite")
    models = _import("tools.scan.models", "rewrite") if _has("tools.scan.models") else api
    fields = getattr(models.RewriteRequest, "model_fields", {})
    kwargs: dict[str, Any] = {"path": Path(path)}
    if "device" in fields:
        kwargs["device"] = device
    if files is not None and "files" in fields:
        kwargs["files"] = files
    if lines is not None and "lines" in fields:
        kwargs["lines"] = lines
    return _dump(api.rewrite(models.RewriteRequest(**kwargs)))


def _has(module: str) -> bool:
    try:
        importlib.import_module(module)
        return True
    except ImportError:
        return False


# --- parity / profile ----------------------------------------------------------------------


def compare(ref_dir: Path, target_dir: Path) -> dict[str, Any]:
    background.wait_prewarm()  # it may be importing torch and the parity tools right now
    mod = _import("tools.parity.compare", "parity")
    options_cls = getattr(mod, "CompareOptions", None)
    if options_cls is None:
        models = _import("tools.parity.models", "parity")
        options_cls = models.CompareOptions
    dump_mod = _import("tools.probe.dump", "parity")
    try:
        return _dump(mod.compare_dumps(Path(ref_dir), Path(target_dir), options_cls()))
    except dump_mod.DumpError as exc:  # a dump missing, refused or forged: parity is not proven
        raise FerryAgentError(f"parity cannot be proven: {exc}", status="partial") from exc


def profile_report(profile_dir: Path, repo_root: Path) -> dict[str, Any]:
    background.wait_prewarm()
    mod = _import("tools.profile.report", "profile")
    return _dump(mod.build_profile_report(Path(profile_dir), Path(repo_root)))
