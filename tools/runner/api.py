"""``run(RunRequest) -> RunResult``: run a command on a private copy of a repo, in the sandbox."""

from __future__ import annotations

import json
import logging
import math
import os
import shutil
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import TypedDict

from sandbox import (
    Limits,
    SandboxResult,
    SandboxUnavailable,
    Workspace,
    WorkspaceError,
    create_workspace,
    hostmem,
    run_in_sandbox,
)
from sandbox.artifacts import ArtifactLimits, ArtifactRefused, Collected, Refusal, collect
from sandbox.execute import start_directory
from sandbox.isolation import choose, ferry_root
from sandbox.limits import disk_limit_from_env
from sandbox.runspace import RunSpace, open_run_space
from sandbox.sizes import format_size
from sandbox.teardown import Stuck, TeardownWatch
from tools.repopath import repo_path_problem
from tools.runner.env import child_env, child_path_env
from tools.runner.interpreter import Interpreter, InterpreterError, inspect_interpreter
from tools.runner.launch import device_env
from tools.runner.models import (
    PROBE_ENDED_EXIT_CODE,
    PROBE_ENDED_FILE,
    Device,
    RefusedArtifact,
    RunRequest,
    RunResult,
    RunStatus,
    StartupTimes,
)
from tools.trace import Signature, Trace, parse_trace
from tools.trace.models import TestOutcome
from tools.trace.parse import signature_for_status
from tools.trace.pytest_out import JunitRefused, read_junit_xml
from tools.trace.stacks import process_stack, teardown_trace

logger = logging.getLogger(__name__)

TAIL_CHARS = 20_000
STARTUP_FILE = "startup.json"  # ARTIFACTS/child/startup.json: the bootstrap's start-up breakdown
STARTUP_PARTS = ("torch_s", "device_s", "redirect_s", "hooks_s")
STACKS_DIR = "stacks"  # ARTIFACTS/child/stacks: the run's processes' stack dumps (sandbox.teardown)
COLLECTED_DIR = "collected"  # ARTIFACTS/collected: the host-owned copy of what the run left in child/
COVERAGE_FILE = "coverage.json"  # a RunRequest(coverage=True)'s report, under COLLECTED_DIR
COLLECT_FILE = "collect.json"  # a RunRequest(collect_only=True)'s node ids, under COLLECTED_DIR
ARTIFACTS_MARKER = ".ferry-artifacts"  # written into every artifacts dir a run used
REPLACED_ENTRIES = ("child", COLLECTED_DIR, "stdout.txt", "stderr.txt", "result.json")  # each run replaces these


class RunnerInputError(ValueError):
    """The request cannot be run as given (missing repo, bad artifacts dir)."""


class _RunFacts(TypedDict):
    """The fields every RunResult of one run shares, whichever way it ended."""

    command: list[str]
    device: Device
    redirect_cuda: Device | None
    seed: int
    artifacts_dir: Path
    workspace: Path | None
    workspace_method: str
    python: str
    cwd: str | None


# what a sandbox run's status means for the run (a sandbox_error never comes from a run that ran)
_STATUSES: dict[str, RunStatus] = {"ok": "ok", "failed": "failed", "timeout": "timeout", "killed": "killed",
                                   "cancelled": "cancelled"}


def foreign_entries(artifacts: Path | str) -> list[str]:
    """What a run would replace in the existing directory ``artifacts`` although no run of Ferry made
    it (``child/``, ``collected/``, ``stdout.txt``...): a directory of the user's given as the artifacts
    dir. Empty for a new or empty directory and for one a run used before (its marker file)."""
    path = Path(artifacts)
    if not path.is_dir() or (path / ARTIFACTS_MARKER).exists():
        return []
    return [name for name in REPLACED_ENTRIES if os.path.lexists(path / name)]


def _level(req: RunRequest) -> str | None:
    """The isolation level the run will get (None when the one asked for is not available: the
    sandbox then says so as the run's result)."""
    try:
        return choose(None if req.isolation in (None, "auto") else req.isolation).level
    except SandboxUnavailable:
        return None


def _limits(req: RunRequest) -> Limits:
    base = Limits(timeout_s=req.timeout_s)
    overrides = {k: v for k, v in req.limits.model_dump().items() if v is not None}
    if "disk_bytes" not in overrides:
        try:
            env_cap = disk_limit_from_env()
        except ValueError as exc:
            raise RunnerInputError(f"{exc}; unset it or give a size like 4G") from None
        if env_cap is not None:
            overrides["disk_bytes"] = env_cap
    for key in ("memory_bytes", "run_memory_bytes", "disk_bytes"):  # explicit values win, but are not hidden
        warning = hostmem.oversized(f"the run's {key}", overrides[key]) if overrides.get(key) else None
        if warning is not None:
            logger.warning("runner: %s", warning)
    return Limits(**{**base.to_dict(), **overrides})


def _limit_message(limit_hit: str | None, limits: Limits, space: RunSpace, isolation: str, control: str) -> str | None:
    """What a run that hit a whole-run limit is told: which limit, how big, how to raise it."""
    if limit_hit == "disk_quota":
        return (f"the run wrote more than its {format_size(limits.disk_bytes)} disk cap ({space.scope(isolation)}); "
                "raise it with --disk-limit or FERRY_DISK_LIMIT")
    if limit_hit == "memory" and limits.run_memory_bytes is not None:
        return (f"the run's processes together used more than its {format_size(limits.run_memory_bytes)} memory cap "
                f"({control}): the kernel killed one and the run was ended; raise RunLimits.run_memory_bytes")
    if limit_hit == "processes":
        return (f"the run reached its limit of {limits.run_processes} processes and threads in all ({control} "
                "pids.max): starting another was refused; raise RunLimits.run_processes")
    return None


def _workspace(src: Path, space: RunSpace, root: Path | None) -> Workspace:
    """The private copy, inside the run's space when it is mounted (its bytes count against the cap)."""
    try:
        return create_workspace(src, root=space.workspace_root or root)
    except WorkspaceError as exc:
        if space.mounted and "No space left on device" in str(exc):
            raise RunnerInputError(f"the repository does not fit in the run's {format_size(space.cap_bytes)} disk "
                                   "cap (its copy counts against it); raise it with --disk-limit or "
                                   "FERRY_DISK_LIMIT") from exc
        raise RunnerInputError(str(exc)) from exc


def _trace_for(req: RunRequest, status: str, limit_hit: str | None, stdout: str, stderr: str, workspace: Path,
               junit_tests: list[TestOutcome] | None, limit_message: str | None = None,
               interp: Interpreter | None = None) -> Trace | None:
    trace = parse_trace(
        stderr,
        stdout=stdout,
        repo_roots=[workspace],
        library_roots=_library_roots(interp),
        junit_tests=junit_tests or [],
    )
    forced: Signature | None = signature_for_status(status, limit_hit, limit_message)
    if forced is not None:
        if trace is None:
            exc = {"timeout": "Timeout", "disk_quota": "DiskQuotaExceeded"}.get(forced.kind, "KilledByLimit")
            msg = forced.detail or ""
            return Trace(exc_type=exc, message=msg, signature=forced)
        if trace.signature.kind not in ("killed_by_limit",):
            trace.signature = forced
    if status == "ok" and trace is not None and not any(t.outcome in ("failed", "error") for t in trace.tests):
        return None  # a handled exception printed by a successful program is not a failure
    return trace


def _library_roots(interp: Interpreter | None) -> list[str | Path]:
    return [ferry_root(), Path(sys.prefix), Path(sys.base_prefix), *(interp.roots() if interp else [])]


def _teardown_trace(stuck: list[Stuck], collected: Collected, workspace: Path, grace_s: float,
                    interp: Interpreter | None) -> Trace:
    """A run ended as hung in its teardown: each stuck process with the stack it dumped (read from the
    collected copy, never from the run's own directory)."""
    where = collected.dest / STACKS_DIR
    stacks_dir = where if where.is_dir() and not where.is_symlink() else None
    libs = [str(p) for p in _library_roots(interp)]
    # the job's ranks first, then its agent, then any other process
    order = sorted(stuck, key=lambda s: (not s.role.startswith("rank"), s.role != "agent", s.pid))
    stacks = [process_stack(stacks_dir, s.pid, s.role, s.shutting_down, s.stack_file, [str(workspace)], libs)
              for s in order[:16]]
    return teardown_trace(stacks, grace_s)


def _remove(path: Path) -> None:
    if path.is_symlink() or path.is_file():
        path.unlink()
    elif path.exists():
        shutil.rmtree(path)


def _collect_outputs(out: Path, artifacts: Path, limits: ArtifactLimits, source: Path | None = None) -> Collected:
    """Copy what the run could write (``out``, or ``source``: the run space's directory that was
    bound on it) into the host-owned ``artifacts/collected`` through sandbox.artifacts (no links
    followed, regular files only, size caps), then remove ``out``. Called right after the run,
    before anything parses its files: every path of the result points into the copy, which no
    sandbox ever sees. Read in place from the space, nothing over the caps reaches the host disk."""
    dest = artifacts / COLLECTED_DIR
    _remove(dest)  # a previous run's copy in a reused artifacts dir
    try:
        got = collect(source or out, dest, max_file_bytes=limits.max_file_bytes, max_total_bytes=limits.max_total_bytes,
                      max_files=limits.max_files)
    except ArtifactRefused as exc:  # the output dir itself is gone or not a directory
        logger.warning("run output dir %s not collected: %s", out, exc.reason)
        dest.mkdir(mode=0o700, exist_ok=True)
        got = Collected(dest=dest, refused=[Refusal(path=".", reason=exc.reason)])
    shutil.rmtree(out, ignore_errors=True)  # fd-based on Linux: never follows a link the run planted
    return got


def _host_dir(collected: Collected, name: str, refused: list[RefusedArtifact]) -> Path:
    """``collected.dest/name``, made (empty) when the run's own was refused or never written, or
    when the run left a file under that name instead of the directory (refused, its copy removed)."""
    path = collected.dest / name
    if path.is_dir():  # the copy holds no links: collect never makes one
        return path
    if path.exists():
        path.unlink()
        collected.accepted = [p for p in collected.accepted if p != name]
        refused.append(RefusedArtifact(path=name, reason="not a directory (the run replaced it with a file)"))
    path.mkdir(mode=0o700)
    return path


def _junit(collected: Collected, refused: list[RefusedArtifact]) -> tuple[Path | None, list[TestOutcome] | None]:
    """The collected junit XML and its outcomes; an unsafe one (a DTD, malformed) joins ``refused``."""
    if not collected.has("junit.xml"):
        return None, None
    path = collected.dest / "junit.xml"
    try:
        return path, read_junit_xml(path)
    except JunitRefused as exc:
        refused.append(RefusedArtifact(path="junit.xml", reason=str(exc)))
        return None, None


def run(req: RunRequest, cancel: threading.Event | None = None) -> RunResult:
    """Run ``req.command`` in the sandbox on a private copy of ``req.path``.

    ``cancel``: an event another thread may set to stop the run early (status ``cancelled``).
    """
    src = Path(req.path).expanduser()
    problem = repo_path_problem(src)
    if problem is not None:
        raise RunnerInputError(problem)
    if not src.is_dir():
        raise RunnerInputError(f"repository path {src} is not a directory; pass the folder of the repo to run")
    command = ["/bin/sh", "-c", req.command] if isinstance(req.command, str) else list(req.command)
    interp = _interpreter(req)
    limits = _limits(req)
    artifacts = Path(req.artifacts_dir) if req.artifacts_dir else Path(tempfile.mkdtemp(prefix="ferry-run-"))
    try:
        artifacts.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise RunnerInputError(f"cannot create artifacts dir {artifacts}: {exc}") from exc
    artifacts = artifacts.resolve()
    try:
        (artifacts / ARTIFACTS_MARKER).touch()
    except OSError as exc:
        raise RunnerInputError(f"cannot write into the artifacts dir {artifacts}: {exc.strerror}") from exc
    try:
        artifact_limits = ArtifactLimits.from_env()
    except ValueError as exc:
        raise RunnerInputError(str(exc)) from exc
    # One capped tmpfs for all the run may write (sandbox.runspace); it also unmounts what an ended
    # Ferry left, so before ``out`` is cleared (a bind of such a space may still sit on it).
    space = open_run_space(limits.disk_bytes)
    try:
        return _run_in_space(req, cancel, command, limits, src, artifacts, space, artifact_limits, interp)
    finally:
        # Never copied back: a finished run's files were read in place (sandbox.artifacts.collect);
        # after an exception or Ctrl-C nobody reads them, and a copy would put up to the whole disk
        # cap of the run's files (links, owners as it left them) on the host disk.
        space.close(copy=False)


def _interpreter(req: RunRequest) -> Interpreter | None:
    """The user's interpreter the run uses, checked (None: Ferry's own, which needs no check)."""
    if req.python is None:
        return None
    try:
        interp = inspect_interpreter(req.python)
    except InterpreterError as exc:
        raise RunnerInputError(str(exc)) from None
    return None if interp.is_ferrys else interp


def _start_dir_problem(ws: Workspace, cwd: str | None) -> str | None:
    """Why the copy cannot start in ``cwd`` (not there, not a directory, a link of the repository's
    leading out of it), or None."""
    try:
        start_directory(ws.path.resolve(), cwd)
    except ValueError as exc:
        return f"{exc}; give a directory of the repository relative to its root, e.g. --cwd src"
    return None


def _run_in_space(req: RunRequest, cancel: threading.Event | None, command: list[str], limits: Limits, src: Path,
                  artifacts: Path, space: RunSpace, artifact_limits: ArtifactLimits,
                  interp: Interpreter | None) -> RunResult:
    out = artifacts / "child"  # the only place besides the workspace the child may write
    if out.exists():
        shutil.rmtree(out)
    out.mkdir()
    space.bind_into(out)  # the child's writes under out/ count against the cap too
    # Where the child finds out/: the same path under bubblewrap (bound there); at the weaker levels,
    # which show the host's filesystem to a run with a throw-away uid, the space's own dir (the path
    # to ARTIFACTS, a 0700 temp dir or ~/.ferry, is closed to that uid).
    seen = out if _level(req) == "bwrap" else (space.bound(out) or out)
    redirect_log = seen / "redirect.jsonl" if req.redirect_cuda else None
    probe_dir = seen / "probe" if req.probe else None
    profile_dir = seen / "profile" if req.profile else None
    for d in (probe_dir, profile_dir):
        if d is not None:
            d.mkdir()
    junit = seen / "junit.xml"
    stacks = seen / STACKS_DIR  # the host reads it as the child writes it (a bind of the same directory)
    stacks.mkdir()
    teardown = TeardownWatch(stacks, grace_s=limits.teardown_grace_s) if limits.teardown_grace_s else None

    t_ws = time.perf_counter()
    ws = _workspace(src, space, artifacts if req.keep_workspace else None)
    workspace_s = time.perf_counter() - t_ws
    os.chmod(ws.container, 0o711)  # its uid reaches the copy by path at the weaker levels; nobody lists it
    kept = ws.path
    if req.keep_workspace and space.mounted:  # copied out of the space when the run is over
        kept = Path(tempfile.mkdtemp(prefix="ferry-ws-", dir=artifacts)) / ws.path.name
    problem = _start_dir_problem(ws, req.cwd)
    if problem is not None:
        _finish_workspace(req, ws, kept, space)
        raise RunnerInputError(problem)
    env = child_env(workspace=ws.path, device=req.device, redirect_cuda=req.redirect_cuda, seed=req.seed,
                    redirect_log=redirect_log, probe_dir=probe_dir, profile_dir=profile_dir, junit_xml=junit,
                    caller_env=req.env, user_env=req.user_env,
                    coverage_json=seen / COVERAGE_FILE if req.coverage else None,
                    collect_json=seen / COLLECT_FILE if req.collect_only else None)
    env.update(device_env(req.command, ws.path / (req.cwd or ""), device=req.device, redirect_cuda=req.redirect_cuda,
                          env=env))  # one device per process of a torchrun / mp.spawn job
    if teardown is not None:
        env.update(teardown.child_env())
    env["FERRY_STARTUP_FILE"] = str(seen / STARTUP_FILE)
    readable: list[Path] = interp.roots() if interp is not None else []
    path_env = child_path_env(interp.bin_dir if interp is not None else None)
    if "tpx" in (req.device, req.redirect_cuda):
        from tools.runner.tpx_ext import host_extension_dir

        ext_dir = host_extension_dir()
        if ext_dir is not None:
            readable.append(ext_dir)
            env["TPX_EXTENSION_DIR"] = str(ext_dir)
    warm = None
    warm_fallback: str | None = None
    if isinstance(req.command, str):
        from tools.runner import warm as warm_mod

        if interp is None and warm_mod.enabled():
            warm_fallback = warm_mod.cold_reason(req.user_env)
        if interp is None and warm_fallback is None:
            warm = warm_mod.warm_start_for(req.command, env)
        elif interp is not None and warm_mod.enabled():
            warm_fallback = (f"the run uses the interpreter {interp.path}; warm starts fork from Ferry's own "
                             f"({sys.executable}), so it starts cold")
    base = _RunFacts(command=command, device=req.device, redirect_cuda=req.redirect_cuda, seed=req.seed,
                     artifacts_dir=artifacts, workspace=kept if req.keep_workspace else None,
                     workspace_method=ws.method, python=interp.path if interp is not None else sys.executable,
                     cwd=req.cwd)
    launched = time.time()
    try:
        res = run_in_sandbox(command, ws.path, limits=limits, env=env, writable=[out], readable=readable,
                             isolation=None if req.isolation in (None, "auto") else req.isolation,
                             path_env=path_env, cancel=cancel, warm=warm, space=space, cwd=req.cwd,
                             teardown=teardown)
        space.unbind(copy=False)  # what the child wrote under out/ stays in the space, read from there
    except SandboxUnavailable as exc:
        _finish_workspace(req, ws, kept, space)
        return RunResult(exit_code=None, status="sandbox_error", duration_s=0.0, stdout_tail="", stderr_tail="",
                         isolation="none", error=f"{exc}. Run `ferry doctor` to see which isolation levels work here.",
                         **base)
    try:
        # before anything parses what the run wrote
        collected = _collect_outputs(out, artifacts, artifact_limits, space.contents_of(out))
        status = _status(res)
        setup = res.stderr.lstrip()
        if res.isolation == "bwrap" and res.exit_code == 1 and setup.startswith("bwrap:"):
            # bubblewrap itself failed before the command started (bad mount, namespaces refused)
            err = setup.splitlines()[0]
            return RunResult(exit_code=None, status="sandbox_error", duration_s=res.duration_s, stdout_tail="",
                             stderr_tail=res.stderr[-TAIL_CHARS:], isolation=res.isolation,
                             isolation_reasons=res.isolation_reasons,
                             error=f"the sandbox could not start the command ({err}). Run `ferry doctor`; "
                                   "FERRY_SANDBOX_ISOLATION=unshare selects the weaker fallback explicitly.",
                             **base)
        refused = [RefusedArtifact(path=r.path, reason=r.reason) for r in collected.refused]
        probe_host = _host_dir(collected, "probe", refused) if probe_dir is not None else None
        profile_host = _host_dir(collected, "profile", refused) if profile_dir is not None else None
        junit_path, junit_tests = _junit(collected, refused)
        ended = _ended_after(req, status, res.exit_code, probe_host)
        if ended is not None:
            status = "ended"
        trace = None
        if res.limit_hit == "teardown_hang":
            trace = _teardown_trace(res.stuck, collected, ws.path, limits.teardown_grace_s or 0.0, interp)
        elif status not in ("ok", "cancelled") or junit_path is not None:
            trace = _trace_for(req, status, res.limit_hit, res.stdout, res.stderr, ws.path, junit_tests,
                               _limit_message(res.limit_hit, limits, space, res.isolation, res.resource_control),
                               interp)
        (artifacts / "stdout.txt").write_text(res.stdout)
        (artifacts / "stderr.txt").write_text(res.stderr)
        result = RunResult(
            exit_code=res.exit_code,
            status=status,
            duration_s=res.duration_s,
            stdout_tail=res.stdout[-TAIL_CHARS:],
            stderr_tail=res.stderr[-TAIL_CHARS:],
            stdout_dropped=res.stdout_dropped,
            stderr_dropped=res.stderr_dropped,
            isolation=res.isolation,
            isolation_reasons=res.isolation_reasons,
            warm_start=res.warm,
            warm_fallback=res.warm_fallback or warm_fallback,
            disk_cap=res.disk_cap,
            resource_control=res.resource_control,
            resource_control_reasons=res.resource_control_reasons,
            seccomp=res.seccomp or None,
            trace=trace,
            signal=res.signal,
            limit_hit=res.limit_hit,
            probe_dir=probe_host,
            profile_dir=profile_host,
            redirect_log_path=(collected.dest / "redirect.jsonl"
                               if redirect_log is not None and collected.has("redirect.jsonl") else None),
            junit_xml=junit_path,
            artifacts_refused=refused,
            startup=_startup(collected, workspace_s, launched, time.time() - launched),
            ended_after_steps=ended,
            **base,
        )
        (artifacts / "result.json").write_text(result.model_dump_json(indent=2))
        return result
    finally:
        _finish_workspace(req, ws, kept, space)


def _startup(collected: Collected, workspace_s: float, launched: float, run_s: float) -> StartupTimes:
    """The run's start-up breakdown: the host's own measure of the copy, and what the run's first process
    wrote to ``startup.json`` (untrusted: a small JSON object of finite seconds, each within ``run_s``, the
    host's time from the sandbox call to now, a wait for the warm interpreter included; anything else is
    left out)."""
    times = StartupTimes(workspace_s=round(workspace_s, 4))
    if not collected.has(STARTUP_FILE):
        return times
    try:
        with open(collected.dest / STARTUP_FILE, "rb") as fh:  # the collected copy: no link, a regular file
            raw = json.loads(fh.read(4096))
    except (OSError, ValueError):
        return times
    if not isinstance(raw, dict):
        return times

    def seconds(value: object, upper: float) -> float | None:
        if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
            return None
        return round(float(value), 4) if 0.0 <= value <= upper + 1.0 else None

    start, ready = raw.get("start"), raw.get("ready")
    upper = max(run_s, 0.0)
    launch = seconds(start - launched, upper) if isinstance(start, int | float) else None
    boot = seconds(ready - start, upper) if isinstance(start, int | float) and isinstance(ready, int | float) else None
    parts = {k: seconds(raw.get(k), upper) for k in STARTUP_PARTS}
    first = workspace_s + launch + boot if launch is not None and boot is not None else None
    return times.model_copy(update={"launch_s": launch, "bootstrap_s": boot, **parts,
                                    "first_line_s": round(first, 4) if first is not None else None})


def _ended_after(req: RunRequest, status: RunStatus, exit_code: int | None, probe_dir: Path | None) -> int | None:
    """The steps after which the probe ended the program (``FERRY_PROBE_END=1`` asked for it, the run exited
    with the probe's code and its dump dir holds the probe's marker), or None: the run ended on its own."""
    if (status != "failed" or exit_code != PROBE_ENDED_EXIT_CODE or probe_dir is None
            or (req.env or {}).get("FERRY_PROBE_END") != "1"):
        return None
    try:
        marker = json.loads((probe_dir / PROBE_ENDED_FILE).read_text(encoding="utf-8"))
        steps = marker["steps"]
    except (OSError, ValueError, KeyError, TypeError):
        return None
    return steps if isinstance(steps, int) and not isinstance(steps, bool) and steps >= 0 else None


def _status(res: SandboxResult) -> RunStatus:
    try:
        return _STATUSES[res.status]
    except KeyError:
        raise RuntimeError(f"the sandbox reported an unknown run status {res.status!r}") from None


def _finish_workspace(req: RunRequest, ws: Workspace, kept: Path, space: RunSpace) -> None:
    """Keep the copy that ran where asked (out of the space, which goes next), or remove it."""
    if req.keep_workspace and space.mounted:
        space.keep(ws.path, kept)
    elif not req.keep_workspace and not space.mounted:
        ws.cleanup()  # inside the space it goes with the unmount
