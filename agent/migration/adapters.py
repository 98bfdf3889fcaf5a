"""Thin adapters from the agent to the deterministic tools (runner, scan/rewrite, parity, profile).

Each returns the tool's own pydantic model. The tools are imported lazily (``ferry --help`` and
the early reference run must not pay for libcst or torch), and an ImportError becomes
:class:`ToolUnavailable`, so a node whose tool is missing ends the migration with the named status
``failed_tool_unavailable`` instead of pretending.
"""

from __future__ import annotations

import importlib
import logging
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING

from agent.errors import EnvironmentMissing, FerryAgentError, ToolUnavailable

if TYPE_CHECKING:
    from agent.migration.state import MigrationOptions
    from tools.parity.models import ParityReport
    from tools.profile.models import DeviceWork, ProfileReport
    from tools.runner.models import RunResult
    from tools.scan.models import RewriteResult, ScanReport

logger = logging.getLogger(__name__)


def _import(module: str, what: str) -> ModuleType:
    try:
        return importlib.import_module(module)
    except ImportError as exc:
        raise ToolUnavailable(
            f"the {what} tool ({module}) is not available in this installation: {exc}. "
            "Install Ferry with all its tools (scripts/setup) and run again."
        ) from exc


# --- sandbox -------------------------------------------------------------------------------


def create_workspace(src: Path, root: Path) -> Path:
    """A private copy of ``src`` under ``root``; returns its directory."""
    mod = _import("sandbox.workspace", "workspace")
    root.mkdir(parents=True, exist_ok=True)
    return Path(mod.create_workspace(Path(src), root=root).path)


# --- runner --------------------------------------------------------------------------------


@dataclass(frozen=True)
class RunEnvironment:
    """The user's own environment every run of a migration gets (MigrationOptions python/env/cwd)."""

    python: str | None = None  # None: Ferry's own interpreter
    env: dict[str, str] = field(default_factory=dict)
    cwd: str | None = None

    @classmethod
    def of(cls, opts: MigrationOptions) -> RunEnvironment:
        return cls(python=opts.python, env=dict(opts.env), cwd=opts.cwd)


# The environment of the migration whose node runs now: set by agent.migration.nodes.common.step from the
# state's options (and carried into background runs by RunScheduler.start), so that every
# toolbox.run of a node, whichever node, runs in the user's environment without each passing it.
_current: ContextVar[RunEnvironment | None] = ContextVar("ferry_run_environment", default=None)
# The migration's stop signal (the service's DELETE): a run of a node that has no cancel event of its own
# stops when it is set. Set around the graph's drive; LangGraph copies the context into its node threads.
_stop: ContextVar[threading.Event | None] = ContextVar("ferry_migration_stop", default=None)


@contextmanager
def stop_signal(event: threading.Event) -> Iterator[None]:
    token = _stop.set(event)
    try:
        yield
    finally:
        _stop.reset(token)


@contextmanager
def run_environment(environment: RunEnvironment) -> Iterator[None]:
    token = _current.set(environment)
    try:
        yield
    finally:
        _current.reset(token)


def current_environment() -> RunEnvironment | None:
    """The run environment of the migration whose node runs now (None outside a node)."""
    return _current.get()


def side_by_side_env() -> dict[str, str]:
    """Ferry's settings for every run of a migration: its runs go side by side, so each computes on its
    share of the cores (``sandbox.hostmem.side_by_side_threads``; OMP_NUM_THREADS in the run unless the user
    set it). The warm interpreter the runs fork from starts with the same (``RunScheduler.prewarm_runs``)."""
    env_mod = _import("tools.runner.env", "runner")
    hostmem = _import("sandbox.hostmem", "runner")
    return {env_mod.RUN_THREADS_ENV: str(hostmem.side_by_side_threads())}


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
    environment: RunEnvironment | None = None,
    coverage: bool = False,
    collect_only: bool = False,
) -> RunResult:
    """One sandboxed run (``disk_limit_bytes``: its disk cap in all; None: $FERRY_DISK_LIMIT or host-based),
    in ``environment`` (default: the current migration's, ``run_environment``)."""
    models = _import("tools.runner.models", "runner")
    api = _import("tools.runner.api", "runner")
    artifacts_dir.mkdir(parents=True, exist_ok=True)
    own = environment or _current.get() or RunEnvironment()
    if own.python:  # checked when the migration started; on resume it may be gone or changed since
        interp = _import("tools.runner.interpreter", "runner")
        try:
            interp.inspect_interpreter(own.python)
        except interp.InterpreterError as exc:
            raise EnvironmentMissing(f"the migration's interpreter cannot run its code any more: {exc}") from exc
    req = models.RunRequest(
        path=Path(path), command=command, device=device, redirect_cuda=redirect_cuda, probe=probe, profile=profile,
        seed=seed, timeout_s=timeout_s, env={**side_by_side_env(), **(env or {})}, artifacts_dir=artifacts_dir,
        limits=models.RunLimits(disk_bytes=disk_limit_bytes),
        python=Path(own.python) if own.python else None, user_env=dict(own.env), cwd=own.cwd, coverage=coverage,
        collect_only=collect_only,
    )
    logger.info("run %s on %s (redirect=%s probe=%s profile=%s)", command, device, redirect_cuda, probe, profile)
    result: RunResult = api.run(req, cancel=cancel or _stop.get())
    return result


# --- scan / rewrite ------------------------------------------------------------------------


def scan(path: Path) -> ScanReport:
    api = _import("tools.scan.api", "scan")
    models = _import("tools.scan.models", "scan")
    report: ScanReport = api.scan(models.ScanRequest(path=Path(path)))
    return report


def rewrite(path: Path, *, device: str, files: list[str] | None = None,
            lines: dict[str, list[int]] | None = None, skip_rules: list[str] | None = None) -> RewriteResult:
    """The catalogue codemods over ``path`` (``skip_rules``: catalogue ids left out, e.g. by the user's request)."""
    api = _import("tools.scan.api", "rewrite")
    models = _import("tools.scan.models", "rewrite")
    rules = None
    if skip_rules:
        registry = _import("tools.codemods.registry", "rewrite")
        rules = [r.ID for r in registry.all_rules() if r.ID not in set(skip_rules)]
    result: RewriteResult = api.rewrite(models.RewriteRequest(path=Path(path), device=device, files=files, lines=lines,
                                                              rules=rules))
    return result


# --- parity / profile ----------------------------------------------------------------------


@lru_cache(maxsize=1)
def _one_host_thread() -> None:
    """The migration process's own tensor work (the parity comparisons) runs on one intra-op thread. Its
    runs take the cores meanwhile: on two busy cores torch's two threads wait on each other at every op,
    and a comparison took 4-6x as long as on one thread (``tools.parity.metrics.compute_metrics`` on a
    1M-element pair: 120-240 ms on two threads, 20-60 ms on one, load average 4-6)."""
    torch = _import("torch", "parity")
    torch.set_num_threads(1)


def compare(ref_dir: Path, target_dir: Path, dtype_changes: dict[str, str] | None = None,
            golden_dir: Path | None = None, drift_budget: bool = True) -> ParityReport:
    """The reference's probe dump against the target's (call ``RunScheduler.wait_prewarm`` first
    when a prewarm may be importing torch on another thread); ``dtype_changes`` are the dtypes the
    migration changed (float64 -> float32), compared at the tier of the dtype the target computes in;
    ``golden_dir``: the fp32 golden run's dump, for docs/numerics.md's error-ratio check; ``drift_budget``
    False: a training's later steps judged strictly too (docs/parity.md)."""
    mod = _import("tools.parity.compare", "parity")
    models = _import("tools.parity.models", "parity")
    _one_host_thread()
    dump_mod = _import("tools.probe.dump", "parity")
    options = models.CompareOptions(dtype_changes=dtype_changes or {},
                                    golden_dir=Path(golden_dir) if golden_dir is not None else None,
                                    drift_budget=drift_budget)
    try:
        report: ParityReport = mod.compare_dumps(Path(ref_dir), Path(target_dir), options)
    except dump_mod.DumpError as exc:  # a dump missing, refused or forged: parity is not proven
        raise FerryAgentError(f"parity cannot be proven: {exc}", status="partial") from exc
    return report


def files_run(probe_dir: Path) -> list[str]:
    """The repository files a probed run executed, in the order it began them (empty when its dump does
    not say or cannot be read)."""
    dump_mod = _import("tools.probe.dump", "parity")
    found: list[str] = dump_mod.files_run(Path(probe_dir))
    return found


def cuda_autocasts(run: RunResult) -> int:
    """How many CUDA autocasts the run opened under the redirect (its redirect log's count of
    ``autocast(cuda)``; 0 without a log, or when it cannot be read: the run is then not known to
    compute under autocast)."""
    if run.redirect_log_path is None:
        return 0
    mod = _import("tools.redirect.log", "redirect log")
    try:
        records = mod.load_redirect_log(run.redirect_log_path)
    except mod.RedirectLogError as exc:
        logger.warning("%s", exc)
        return 0
    return sum(r.count for r in records if r.api == "autocast(cuda)")


def profile_report(profile_dir: Path, repo_root: Path) -> ProfileReport:
    mod = _import("tools.profile.report", "profile")
    report: ProfileReport = mod.build_profile_report(Path(profile_dir), Path(repo_root))
    return report


def device_work(profile_dir: Path) -> DeviceWork:
    """How much of a profiled run's work ran on tpx (``tools.profile.report.read_device_work``);
    ``FerryAgentError`` (status ``partial``) when its profile cannot be read."""
    mod = _import("tools.profile.report", "profile")
    try:
        work: DeviceWork = mod.read_device_work(Path(profile_dir))
    except mod.ProfileError as exc:
        raise FerryAgentError(f"no evidence of device work: {exc}", status="partial") from exc
    return work
