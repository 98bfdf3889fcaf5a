"""RunRequest / RunResult: the runner's typed contract (see docs/runner.md)."""

from __future__ import annotations

from pathlib import Path, PurePosixPath
from typing import Literal

from pydantic import BaseModel, Field, field_validator

from tools.trace.models import Trace

# "ended": the probe ended the program after its recorded steps (FERRY_PROBE_END=1, an evidence run): the
# program did not run to its end, so the run is never ``ok``
RunStatus = Literal["ok", "failed", "timeout", "killed", "sandbox_error", "cancelled", "ended"]
# what the probe writes and exits with when it ends a program (the guest's own copy: tools/probe/config.py)
PROBE_ENDED_FILE = "ended.json"
PROBE_ENDED_EXIT_CODE = 86
Device = Literal["tpx", "cpu"]  # where a run computes (and where the CUDA redirect maps CUDA to)


class RunLimits(BaseModel):
    """Sandbox limits for one run (None leaves a limit at the sandbox default)."""

    memory_bytes: int | None = None
    cpu_seconds: int | None = None
    processes: int | None = None
    file_size_bytes: int | None = None
    open_files: int | None = None
    output_bytes: int | None = None
    # Everything the run may write in all (workspace, /tmp, /dev/shm, artifacts); None: $FERRY_DISK_LIMIT or the
    # host-following default (sandbox.hostmem: at most 4 GiB)
    disk_bytes: int | None = Field(default=None, ge=1024**2)
    run_memory_bytes: int | None = None  # all the run's processes together (cgroup); None: host-following, <= 16 GiB
    run_processes: int | None = None  # processes + threads of the whole run (cgroup); None: 1024
    # a run stalled this long in its teardown ends as teardown_hang (sandbox.teardown); None: 5 s, 0: never
    teardown_grace_s: float | None = Field(default=None, ge=0)


class RunRequest(BaseModel):
    path: Path  # repository directory; always run on a private copy
    command: list[str] | str  # a str runs with /bin/sh -c
    device: Device = "tpx"
    redirect_cuda: Device | None = None
    probe: bool = False
    profile: bool = False
    seed: int = 0
    timeout_s: float = 600.0
    env: dict[str, str] = Field(default_factory=dict)  # only FERRY_*/TPX_* keys pass through
    # The user's own variables (--env KEY=VALUE): plain names, none of the runner's own (FERRY_*/TPX_*, PATH,
    # HOME...) nor of the loader/interpreter deny-list (tools.runner.env.user_env_problems, sandbox.userenv);
    # a PYTHONPATH is merged after Ferry's bootstrap dir. They reach only the sandboxed program.
    user_env: dict[str, str] = Field(default_factory=dict)
    python: Path | None = None  # the interpreter the code runs with (None: Ferry's own); tools.runner.interpreter
    cwd: str | None = None  # where the command starts, relative to the repository (None: its root)
    artifacts_dir: Path | None = None  # where logs, probe/profile dirs and (if kept) the workspace go
    keep_workspace: bool = False  # keep the copy that ran under artifacts_dir/workspace
    #: a pytest run: measure line coverage of the repository's code with the run's own coverage.py (the
    #: ``_ferry_cov`` plugin); the report lands in the collected artefacts as ``coverage.json``
    coverage: bool = False
    #: a pytest run that only collects its tests (``--collect-only`` and the ``_ferry_collect`` plugin): the node
    #: ids, as the junit report names them, land in the collected artefacts as ``collect.json``
    collect_only: bool = False
    isolation: Literal["auto", "bwrap", "unshare", "rlimits"] | None = None
    limits: RunLimits = Field(default_factory=RunLimits)

    @field_validator("command")
    @classmethod
    def _non_empty(cls, value: list[str] | str) -> list[str] | str:
        if (isinstance(value, str) and not value.strip()) or (isinstance(value, list) and not value):
            raise ValueError("command is empty: give the program to run, e.g. ['python', 'train.py']")
        return value

    @field_validator("user_env")
    @classmethod
    def _user_env(cls, value: dict[str, str]) -> dict[str, str]:
        from tools.runner.env import user_env_problems

        if (problem := user_env_problems(value)) is not None:
            raise ValueError(problem)
        return value

    @field_validator("cwd")
    @classmethod
    def _inside(cls, value: str | None) -> str | None:
        if value is None:
            return None
        problem = cwd_problem(value)
        if problem is not None:
            raise ValueError(problem)
        return value.strip("/") or None

    @field_validator("timeout_s")
    @classmethod
    def _positive(cls, value: float) -> float:
        if value <= 0:
            raise ValueError(f"timeout_s must be positive, got {value}")
        return value


def cwd_problem(cwd: str) -> str | None:
    """Why ``cwd`` cannot be a run's working directory (relative to the repository), or None;
    whether it exists is checked against the copy that runs."""
    if not cwd.strip():
        return "the working directory is empty; give a directory of the repository, e.g. src"
    if cwd.startswith(("/", "~")):
        return f"the working directory {cwd!r} must be relative to the repository root, e.g. src/app"
    if ".." in PurePosixPath(cwd).parts:
        return f"the working directory {cwd!r} must stay inside the repository (no '..')"
    if "\0" in cwd:
        return "the working directory holds a NUL byte"
    return None


class RefusedArtifact(BaseModel):
    """A file the run left in its output dir that the host did not read (sandbox.artifacts)."""

    path: str  # relative to the run's output dir, e.g. "profile/profile.json"
    reason: str  # "symlink", "not a regular file (fifo)", "hard link to another file", "too large: ..."


class StartupTimes(BaseModel):
    """Where a run's time went before the user's first line, in seconds: the private copy of the repository
    (``workspace_s``, host-measured), the sandbox's set-up and the interpreter's start, or the fork from a warm
    interpreter (``launch_s``: from the sandbox call to the bootstrap's first statement), and the bootstrap
    (``bootstrap_s``) with its parts: torch's import when the probe or profiler needs it before the program
    runs (``torch_s``), tpx's extension load (``device_s``), the CUDA redirect (``redirect_s``) and the
    probe/profiler hooks (``hooks_s``). ``first_line_s``: all of it. The bootstrap's parts are what the run's
    first process reported (untrusted: each checked to be a finite number of seconds, at most the run's own)."""

    workspace_s: float = 0.0
    launch_s: float | None = None
    bootstrap_s: float | None = None
    torch_s: float | None = None
    device_s: float | None = None
    redirect_s: float | None = None
    hooks_s: float | None = None
    first_line_s: float | None = None


class RunResult(BaseModel):
    command: list[str]
    exit_code: int | None
    status: RunStatus
    duration_s: float
    stdout_tail: str
    stderr_tail: str
    stdout_dropped: int = 0
    stderr_dropped: int = 0
    isolation: str  # bwrap | unshare | rlimits ("none" only for a run that never started)
    isolation_reasons: list[str] = Field(default_factory=list)
    warm_start: bool = False  # forked from a pre-imported interpreter (tools.runner.warm), same sandbox
    warm_fallback: str | None = None  # why a warm start this run qualified for started cold instead
    python: str | None = None  # the interpreter the run's code used (RunRequest.python or Ferry's)
    cwd: str | None = None  # where the command started, relative to the repository (None: its root)
    disk_cap: str | None = None  # what capped the run's writes, e.g. "tmpfs 4 GiB in all (workspace, /tmp, ...)"
    resource_control: str | None = None  # cgroup2 | cgroup1 | rlimits: whole-run memory/process limits
    resource_control_reasons: list[str] = Field(default_factory=list)  # why not a stronger level
    seccomp: str | None = None  # "on: ..." under bubblewrap with the filter, else "off: why" (sandbox.seccomp)
    trace: Trace | None = None
    signal: int | None = None
    limit_hit: str | None = None
    device: Device = "tpx"
    redirect_cuda: Device | None = None
    seed: int = 0
    probe_dir: Path | None = None
    profile_dir: Path | None = None
    redirect_log_path: Path | None = None
    junit_xml: Path | None = None
    artifacts_refused: list[RefusedArtifact] = Field(default_factory=list)  # not copied out of the run, not read
    workspace: Path | None = None  # the copy that ran (kept only when asked)
    workspace_method: str | None = None  # reflink / copy
    artifacts_dir: Path | None = None
    error: str | None = None  # sandbox_error: what went wrong and what to do
    startup: StartupTimes | None = None  # the time before the user's first line, by part
    ended_after_steps: int | None = None  # status "ended": the probe ended the program after these recorded steps

    @property
    def ok(self) -> bool:
        """The command ran to the end and exited 0."""
        return self.status == "ok" and self.exit_code == 0

    @property
    def signature_kind(self) -> str | None:
        """The parsed failure's signature kind (``tpx_float64``, ``disk_quota``...), if any."""
        return self.trace.signature.kind if self.trace is not None else None

    def failure_line(self) -> str:
        """One line saying how the run ended: status, exit, and the parsed failure where there is one."""
        head = f"{self.status} (exit {self.exit_code if self.exit_code is not None else '-'})"
        if self.trace is not None:
            first = self.trace.message.splitlines()[0] if self.trace.message else ""
            return f"{head}: {self.trace.exc_type} {first}".rstrip()
        if self.error:
            return f"{head}: {self.error}"
        return head
