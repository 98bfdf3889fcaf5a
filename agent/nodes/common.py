"""What the nodes share: the step wrapper, run summaries, diagnosis from a trace, fix context."""

from __future__ import annotations

import functools
import logging
import shlex
import time
from pathlib import Path
from typing import Any, Callable

from langgraph.errors import GraphBubbleUp

from agent.errors import BudgetExhausted, FerryAgentError
from agent.materialise import artifacts_root, materialise, workspaces_root
from agent.policy.base import Diagnosis, FixContext, Frame
from agent.state import MigrationState, options_of
from tools.patch import list_source_files

logger = logging.getLogger(__name__)

Node = Callable[[MigrationState], dict[str, Any]]


def step(name: str) -> Callable[[Node], Node]:
    """Time a node, log it as a step, and turn agent errors into a named status."""

    def wrap(fn: Node) -> Node:
        @functools.wraps(fn)
        def inner(state: MigrationState) -> dict[str, Any]:
            t0 = time.monotonic()
            try:
                update = fn(state)
            except GraphBubbleUp:  # interrupts must reach LangGraph
                raise
            except FerryAgentError as exc:
                logger.warning("%s: %s (%s)", name, exc, exc.status)
                update = {"status": exc.status, "summary": str(exc), "_summary": f"stopped: {exc.status}: {exc}"}
            except Exception as exc:  # a Ferry bug: keep the migration's record, end it with a name
                logger.exception("%s failed unexpectedly", name)
                update = {"status": "failed_internal", "summary": f"{name}: {type(exc).__name__}: {exc}",
                          "_summary": f"internal error: {type(exc).__name__}: {exc}"}
            seconds = time.monotonic() - t0
            summary = update.pop("_summary", "")
            update["steps"] = [{"node": name, "summary": summary, "seconds": round(seconds, 3)}]
            update["elapsed_s"] = seconds
            return update

        inner.node_name = name  # type: ignore[attr-defined]
        return inner

    return wrap


def check_iteration_budget(state: MigrationState, still_failing: str) -> None:
    """Raise ``BudgetExhausted`` once ``--max-iterations`` fix rounds were applied and the
    migration still fails (``still_failing`` says how), before anyone is asked for another fix."""
    limit = options_of(state).max_iterations
    if (state.get("iteration") or 0) >= limit:
        raise BudgetExhausted(f"iteration budget exhausted: {limit} fix rounds applied and {still_failing}")


def source_of(state: MigrationState) -> Path:
    return Path(options_of(state).source)


def ensure_workspace(state: MigrationState) -> Path:
    opts = options_of(state)
    ws = state.get("workspace")
    return materialise(
        Path(opts.source), Path(ws) if ws else None, state.get("files") or {},
        workspaces_root(opts.state_dir, state["migration_id"]),
    )


def artifacts_dir(state: MigrationState, label: str) -> Path:
    opts = options_of(state)
    return artifacts_root(opts.state_dir, state["migration_id"]) / label


def entry_file(command: str, known: list[str]) -> str | None:
    """The script a run command starts (``python train.py`` -> ``train.py``)."""
    try:
        tokens = shlex.split(command)
    except ValueError:
        return None
    for i, tok in enumerate(tokens):
        if tok.endswith(".py") and tok.lstrip("./") in known:
            return tok.lstrip("./") if not tok.startswith("../") else None
        if tok == "-m" and i + 1 < len(tokens):
            mod = tokens[i + 1].replace(".", "/")
            for cand in (f"{mod}.py", f"{mod}/__main__.py"):
                if cand in known:
                    return cand
            return None
    return None


def relative_to_repo(path: str, known: list[str]) -> str | None:
    """Map a frame's file (absolute in some sandbox copy, or relative) onto a repo file."""
    p = path.replace("\\", "/")
    if p in known:
        return p
    best = None
    for rel in known:
        if p.endswith("/" + rel) and (best is None or len(rel) > len(best)):
            best = rel
    return best


def _get(d: dict[str, Any] | None, *names: str, default: Any = None) -> Any:
    for n in names:
        if d and d.get(n) is not None:
            return d[n]
    return default


def diagnosis_from_run(run: dict[str, Any], phase: str, known: list[str]) -> Diagnosis:
    trace = run.get("trace") or {}
    sig = trace.get("signature") or {}
    if isinstance(sig, str):
        sig = {"kind": sig}
    kind = _get(sig, "kind", default=None)
    if kind is None:
        kind = {"timeout": "timeout", "killed": "killed_by_limit", "sandbox_error": "sandbox_error"}.get(run.get("status", ""), "other")
    raw_frames = _get(trace, "user_frames", "frames", default=[]) or []
    frames: list[Frame] = []
    for fr in raw_frames:
        if fr.get("user") is False or fr.get("is_user") is False:
            continue
        rel = relative_to_repo(str(_get(fr, "file", "path", "filename", default="")), known)
        if rel is None:
            continue
        frames.append(Frame(file=rel, line=int(_get(fr, "line", "lineno", default=0)),
                            function=str(_get(fr, "function", "name", default="")),
                            source=str(_get(fr, "source", "code", "text", default="") or "")))
    message = str(_get(trace, "message", "exc_message", default="") or "")
    if not trace:
        message = (run.get("stderr_tail") or run.get("stdout_tail") or "")[-2000:]
    return Diagnosis(
        phase=phase, kind=str(kind), op=_get(sig, "op", default=None) or _get(trace, "op", default=None),
        exc_type=str(_get(trace, "exc_type", "type", "exception", default="") or ""),
        message=message, frames=frames,
        details={"exit_code": run.get("exit_code"), "status": run.get("status")},
    )


def fix_context(state: MigrationState, workspace: Path | None = None) -> FixContext:
    opts = options_of(state)
    known = list_source_files(Path(opts.source))
    known = sorted(set(known) | set((state.get("files") or {}).keys()))
    return FixContext(
        source=Path(opts.source), workspace=workspace, files=state.get("files") or {}, known_files=known,
        entry_file=entry_file(opts.run_command, known), device_mode=opts.device, tried=state.get("tried") or [],
    )


def run_summary(kind: str, run: dict[str, Any]) -> dict[str, Any]:
    trace = run.get("trace") or {}
    sig = trace.get("signature") or {}
    summary = {
        "kind": kind, "command": run.get("command"), "status": run.get("status"), "exit_code": run.get("exit_code"),
        "duration_s": run.get("duration_s"), "signature": (sig.get("kind") if isinstance(sig, dict) else sig),
        "isolation": run.get("isolation"), "warm_start": bool(run.get("warm_start")),
    }
    if run.get("artifacts_refused"):  # files the run left that the host refused to read (sandbox.artifacts)
        summary["artifacts_refused"] = [f"{r.get('path')}: {r.get('reason')}" for r in run["artifacts_refused"]]
    return summary


def run_is_ok(run: dict[str, Any]) -> bool:
    return run.get("status") == "ok" and run.get("exit_code") == 0
