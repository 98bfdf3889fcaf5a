"""What the nodes share: the step wrapper, the workspace, diagnosis from a run, the fix context."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from langgraph.errors import GraphBubbleUp
from langgraph.runtime import Runtime

from agent.errors import BudgetExhausted, FerryAgentError
from agent.migration import adapters
from agent.migration.entry import entry_file, notebooks_named
from agent.migration.paths import run_artifacts, workspaces_root
from agent.migration.records import RunPhase, Step
from agent.migration.runs import RunScheduler
from agent.migration.state import (
    MigrationState,
    dump,
    edits_of,
    files_of,
    has_options,
    iteration_of,
    migration_id_of,
    options_of,
    reference_of,
    target_ok_of,
    tried_of,
    workspace_of,
)
from agent.migration.workspace import materialise
from agent.policy.base import Diagnosis, FixContext, UserFrame
from tools.patch import list_source_files
from tools.runner.models import RunResult

logger = logging.getLogger(__name__)

Update = dict[str, Any]
NodeFn = Callable[[MigrationState, RunScheduler], Update]
GraphNode = Callable[[MigrationState, Runtime[Any]], Update]
SUMMARY = "_summary"  # a node's one-line account of what it did: becomes its Step, never stored as such



def counted(n: int, noun: str) -> str:
    """``1 file``, ``2 files``: a count with its noun in the right number (nouns taking a plain -s)."""
    return f"{n} {noun}" if n == 1 else f"{n} {noun}s"

def environment_of(state: MigrationState) -> adapters.RunEnvironment:
    """The user's own environment (--python, --env, --cwd) the migration's runs get."""
    if not has_options(state):
        return adapters.RunEnvironment()
    return adapters.RunEnvironment.of(options_of(state))


def step(name: str) -> Callable[[NodeFn], GraphNode]:
    """Make ``fn(state, runs)`` a graph node: it gets the run scheduler from the graph's runtime
    context, is timed and logged as a Step, and agent errors become a named status."""

    def wrap(fn: NodeFn) -> GraphNode:
        # no functools.wraps: LangGraph reads the node's signature (``runtime``), not fn's
        def inner(state: MigrationState, runtime: Runtime[Any]) -> Update:
            t0 = time.monotonic()
            try:
                with adapters.run_environment(environment_of(state)):
                    update = fn(state, runtime.context.runs)
            except GraphBubbleUp:  # interrupts must reach LangGraph
                raise
            except FerryAgentError as exc:
                logger.warning("%s: %s (%s)", name, exc, exc.status)
                update = {"status": exc.status, "summary": str(exc), SUMMARY: f"stopped: {exc.status}: {exc}"}
            except Exception as exc:  # a Ferry bug: keep the migration's record, end it with a name
                logger.exception("%s failed unexpectedly", name)
                update = {"status": "failed_internal", "summary": f"{name}: {type(exc).__name__}: {exc}",
                          SUMMARY: f"internal error: {type(exc).__name__}: {exc}"}
            seconds = time.monotonic() - t0
            summary = str(update.pop(SUMMARY, ""))
            update["steps"] = [dump(Step(node=name, summary=summary, seconds=round(seconds, 3)))]
            update["elapsed_s"] = seconds
            return update

        inner.__name__ = inner.__qualname__ = fn.__name__
        inner.__doc__ = fn.__doc__
        return inner

    return wrap


def check_iteration_budget(state: MigrationState, still_failing: str) -> None:
    """Raise ``BudgetExhausted`` once ``--max-iterations`` fix rounds were applied and the
    migration still fails (``still_failing`` says how), before anyone is asked for another fix."""
    limit = options_of(state).max_iterations
    if iteration_of(state) >= limit:
        raise BudgetExhausted(f"iteration budget exhausted: {limit} fix rounds applied and {still_failing}")


def source_of(state: MigrationState) -> Path:
    return Path(options_of(state).source)


def ensure_workspace(state: MigrationState) -> Path:
    opts = options_of(state)
    ws = workspace_of(state)
    return materialise(
        Path(opts.source), Path(ws) if ws else None, files_of(state),
        workspaces_root(opts.state_dir, migration_id_of(state)),
    )


def artifacts_dir(state: MigrationState, label: str) -> Path:
    opts = options_of(state)
    return run_artifacts(opts.state_dir, migration_id_of(state), label)


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


_KIND_OF_STATUS = {"timeout": "timeout", "killed": "killed_by_limit", "sandbox_error": "sandbox_error"}


def diagnosis_from_run(run: RunResult, phase: RunPhase, known: list[str]) -> Diagnosis:
    """What failed in ``run`` and where (its user frames mapped onto the repository's files)."""
    trace = run.trace
    if trace is None:
        return Diagnosis(phase=phase, kind=_KIND_OF_STATUS.get(run.status, "other"),
                         message=(run.error or run.stderr_tail or run.stdout_tail or "")[-2000:],
                         run_status=run.status, exit_code=run.exit_code)
    frames: list[UserFrame] = []
    for fr in trace.user_frames:
        rel = relative_to_repo(fr.file, known)
        if rel is not None:
            frames.append(UserFrame(file=rel, line=fr.line or 0, function=fr.function or "", source=fr.source or ""))
    return Diagnosis(phase=phase, kind=trace.signature.kind, op=trace.signature.op, exc_type=trace.exc_type,
                     message=trace.message, frames=frames, run_status=run.status, exit_code=run.exit_code,
                     tests=trace.tests)


def files_run_of(state: MigrationState) -> list[str]:
    """The repository files the original program ran, in order (the reference run's probe dump; the
    target's where the reference has none)."""
    for run in (reference_of(state), target_ok_of(state)):
        if run is not None and run.probe_dir is not None:
            found = adapters.files_run(run.probe_dir)
            if found:
                return found
    return []


def fix_context(state: MigrationState, workspace: Path | None = None) -> FixContext:
    opts = options_of(state)
    known = list_source_files(Path(opts.source))
    known = sorted(set(known) | set(files_of(state).keys()))
    return FixContext(
        source=Path(opts.source), workspace=workspace, files=files_of(state), known_files=known,
        entry_file=entry_file(opts.run_command, known, opts.cwd),
        notebooks=notebooks_named(opts.run_command, known, opts.cwd), files_run=files_run_of(state),
        device_mode=opts.device,
        tried=tried_of(state), skip_rules=opts.skip_rules,
    )


def dtype_changes_of(state: MigrationState) -> dict[str, str]:
    """The dtypes the applied edits changed (original -> new; a rewrite's FRY029, the float64_to_float32
    fix): parity compares those tensors at the tier of the dtype the target now computes in."""
    changes: dict[str, str] = {}
    for edit in edits_of(state):
        changes.update(edit.dtype_changes)
    return changes
