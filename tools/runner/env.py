"""The environment the runner gives a sandboxed child."""

from __future__ import annotations

import logging
import os
import re
import sys
from collections.abc import Mapping
from functools import lru_cache
from pathlib import Path

from sandbox.env import filter_caller_env
from sandbox.isolation import ferry_child_dirs, ferry_root
from sandbox.userenv import variable_problem, variables_problem
from tools import repofiles

logger = logging.getLogger(__name__)

CHILD_DIR = Path(__file__).resolve().parent / "child"  # holds the sitecustomize bootstrap

# pytest plugins that reach a sandboxed pytest only because the child runs on Ferry's interpreter
# (langsmith comes with langgraph, anyio with httpx and FastAPI, hypothesis with Ferry's dev extra): plugin
# name -> the package. Each costs a quarter of a second to seconds at every pytest start; it is blocked
# unless the user's code imports the package itself (then the user's tests may rely on it).
FERRY_ONLY_PYTEST_PLUGINS = {"langsmith_plugin": "langsmith", "hypothesispytest": "hypothesis", "anyio": "anyio"}
# packages whose plugin a project can use without importing them: anyio's through a marker
# (``@pytest.mark.anyio``), its ``anyio_backend`` fixture or ``pytest_plugins``/``-p anyio``. Their plugin
# stays wherever the name appears at all, in a .py file or in pytest's configuration files.
USED_BY_NAME = frozenset({"anyio"})
PYTEST_CONFIG_FILES = ("pytest.ini", ".pytest.ini", "pyproject.toml", "setup.cfg", "tox.ini")
_SKIP_DIRS = {".git", ".hg", ".venv", "venv", "env", "node_modules", "__pycache__", "site-packages", ".tox"}
_MAX_FILES = 5000
_MAX_BYTES = 1 << 20


def imports_anywhere(root: Path, packages: set[str], by_name: frozenset[str] = frozenset()) -> set[str]:
    """Which of ``packages`` some .py file under ``root`` imports (a cheap textual check,
    bounded to the first few thousand files); those also in ``by_name`` count wherever their
    name appears (a marker, a fixture), in a .py file or in pytest's configuration files."""
    pattern = re.compile(rb"^\s*(?:import|from)\s+(" + b"|".join(re.escape(p.encode()) for p in sorted(packages))
                         + rb")\b", re.M)
    named = sorted(by_name & packages)
    mention = re.compile(rb"\b(" + b"|".join(re.escape(p.encode()) for p in named) + rb")") if named else None
    found: set[str] = set()
    if mention is not None:
        for config in PYTEST_CONFIG_FILES:
            data = _head(root, config)
            if data is not None:
                found.update(m.group(1).decode() for m in mention.finditer(data))
    seen = 0
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = [d for d in dirnames if d not in _SKIP_DIRS and not d.startswith(".")]
        here = Path(dirpath).relative_to(root).as_posix()
        for name in filenames:
            if not name.endswith(".py"):
                continue
            seen += 1
            if seen > _MAX_FILES:
                return found | packages  # too big to read: assume the user may need them all
            data = _head(root, name if here == "." else f"{here}/{name}")
            if data is None:
                continue
            found.update(m.group(1).decode() for m in pattern.finditer(data))
            if mention is not None:
                found.update(m.group(1).decode() for m in mention.finditer(data))
            if found >= packages:
                return found
    return found


def _head(root: Path, rel: str) -> bytes | None:
    """The first ``_MAX_BYTES`` of the repository file ``root/rel``; None where it is missing or refused (a FIFO
    never blocks, a link is not followed)."""
    try:
        return repofiles.read_bytes(root, rel, max_bytes=_MAX_BYTES, head=True)
    except repofiles.RepoFileError as exc:
        if exc.kind in repofiles.WARN_KINDS:
            logger.warning("import scan: skipping %s", exc)
        return None


def pytest_plugin_blocks(workspace: Path) -> str:
    """``-p no:NAME`` for each Ferry-only pytest plugin the workspace's code does not import."""
    used = imports_anywhere(workspace, set(FERRY_ONLY_PYTEST_PLUGINS.values()), USED_BY_NAME)
    return " ".join(f"-p no:{name}" for name, pkg in FERRY_ONLY_PYTEST_PLUGINS.items() if pkg not in used)


@lru_cache(maxsize=1)
def ensure_bytecode() -> None:
    """Compile Ferry's packages a child can import (``sandbox.isolation.CHILD_PACKAGES``: the bootstrap,
    the redirect, the probe, the profiler, the tpx backend) on the host, where their bytecode is stale or
    missing: the sandbox sees them read-only and children run with PYTHONDONTWRITEBYTECODE, so without
    this every run's start compiles some seventy modules again (about a quarter of a second of every
    run on a small machine). Files whose bytecode is up to date cost a stat each."""
    import compileall

    for d in ferry_child_dirs():
        try:
            compileall.compile_dir(str(d), quiet=1, maxlevels=64)
        except OSError as exc:  # read-only install: children just compile in memory
            logger.debug("cannot precompile %s: %s", d, exc)


# Variables the runner sets for every child (with FERRY_*/TPX_*, its hooks' and settings' prefixes):
# a user's --env may not replace them. PYTHONPATH is merged instead (see child_env).
RUNNER_OWNED = frozenset({"PATH", "HOME", "TMPDIR", "PYTHONNOUSERSITE", "PYTHONHASHSEED", "PYTHONDONTWRITEBYTECODE",
                          "PYTHONHOME", "PYTHONSAFEPATH", "PYTEST_ADDOPTS", "TORCH_DEVICE_BACKEND_AUTOLOAD"})


def user_env_problem(key: str, value: str) -> str | None:
    """Why ``key=value`` cannot be one of the user's own variables for the runs, or None: the one check
    for ``--env``, a session's ``options.env`` and ``RunRequest.user_env`` (the rule and the deny-list
    are ``sandbox.userenv``'s; the runner adds the names it sets itself)."""
    if key in RUNNER_OWNED:
        return (f"{key} is set by the runner for every run (the interpreter's PATH, a private HOME/TMPDIR, the "
                "seed and the test hooks); it cannot be replaced. For another interpreter use --python")
    return variable_problem(key, value)


def user_env_problems(env: Mapping[str, str]) -> str | None:
    """``user_env_problem`` of each of the user's variables, and their number and size in all; None when
    they may all be set."""
    return variables_problem(env, user_env_problem)


def child_path_env(python_bin: Path | None = None) -> str:
    """PATH inside the sandbox: the runs' interpreter's scripts first (``python_bin``; default this
    venv's), so ``python``/``pytest`` are the ones the runs use."""
    return f"{python_bin or Path(sys.prefix) / 'bin'}:/usr/local/bin:/usr/bin:/bin"


HIDDEN_GPUS = ("CUDA_VISIBLE_DEVICES", "HIP_VISIBLE_DEVICES", "ROCR_VISIBLE_DEVICES")


# Ferry's setting (caller_env) for the intra-op threads of a run's processes, given to them as
# OMP_NUM_THREADS unless the user (--env) or Ferry's own environment sets that: a migration's runs go side by
# side (sandbox.hostmem.side_by_side_threads); a lone `ferry run` leaves torch its default (every core).
RUN_THREADS_ENV = "FERRY_RUN_THREADS"
THREADS_VAR = "OMP_NUM_THREADS"


def child_env(
    *,
    workspace: Path,
    device: str,
    redirect_cuda: str | None,
    seed: int,
    redirect_log: Path | None,
    probe_dir: Path | None,
    profile_dir: Path | None,
    junit_xml: Path | None,
    caller_env: dict[str, str],
    user_env: dict[str, str] | None = None,
    coverage_json: Path | None = None,
    collect_json: Path | None = None,
) -> dict[str, str]:
    """The child's variables: the user's own (``user_env``, checked by ``user_env_problem``; any
    refused one is a ValueError), Ferry's settings (``caller_env``, FERRY_*/TPX_* only), then the
    runner's hooks. A user PYTHONPATH is kept after Ferry's bootstrap directory, which stays first
    (its sitecustomize must be the one ``site`` imports): ``PYTHONPATH=src`` runs with
    ``PYTHONPATH=<ferry child dir>:src``; relative entries resolve from the run's working directory
    as they would outside Ferry."""
    ensure_bytecode()
    kept, dropped = filter_caller_env(caller_env)
    if dropped:
        logger.warning("runner: not passing %s to the child (only FERRY_*/TPX_* keys, never secrets)",
                       ", ".join(sorted(dropped)))
    own = dict(user_env or {})
    problem = user_env_problems(own)
    if problem is not None:
        raise ValueError(problem)
    user_path = own.pop("PYTHONPATH", "")
    env = {**own, **kept}
    env.update(
        {
            "PYTHONPATH": str(CHILD_DIR) + (f":{user_path}" if user_path else ""),
            "PYTHONNOUSERSITE": "1",
            "PYTHONHASHSEED": str(seed),
            "FERRY_ROOT": str(ferry_root()),
            "FERRY_SEED": str(seed),
            "FERRY_DEVICE": device,
            "FERRY_WORKSPACE": str(workspace),
        }
    )
    # No run sees a real GPU of the host: a CPU run (the reference, the CPU check) must compute on CPU,
    # and a tpx run on tpx, also where the user's interpreter (--python) has a CUDA build of torch and
    # the machine a GPU (device-generic code would pick CUDA first). The user's own --env cannot undo it.
    env.update({key: "" for key in HIDDEN_GPUS})
    # torch's device-backend autoload would import Ferry's tpx by its bare name (`backend`, the
    # `torch.backends` entry point of Ferry's own install): in the user's process the bootstrap loads
    # it instead, under its private name, and only for a tpx run (a CPU run must not see tpx as "the
    # accelerator": code that picks torch.accelerator.current_accelerator() would run on tpx).
    env["TORCH_DEVICE_BACKEND_AUTOLOAD"] = "0"
    threads = env.pop(RUN_THREADS_ENV, None)
    if threads and threads.isdigit() and int(threads) > 0 and THREADS_VAR not in own \
            and not os.environ.get(THREADS_VAR):
        env[THREADS_VAR] = threads  # read by torch (and OpenMP/MKL) when they start: the warm server's too
    if redirect_cuda:
        env["FERRY_REDIRECT_CUDA"] = redirect_cuda
        if redirect_log is not None:
            env["FERRY_REDIRECT_LOG"] = str(redirect_log)
    if probe_dir is not None:
        env["FERRY_PROBE_DIR"] = str(probe_dir)
    if profile_dir is not None:
        env["FERRY_PROFILE_DIR"] = str(profile_dir)
    if junit_xml is not None:
        blocks = pytest_plugin_blocks(workspace)
        env["PYTEST_ADDOPTS"] = f"--junit-xml={junit_xml} -p no:cacheprovider {blocks}".rstrip()
        if coverage_json is not None:  # tools/runner/child/_ferry_cov.py, on the child's PYTHONPATH
            env["PYTEST_ADDOPTS"] += " -p _ferry_cov"
            env["FERRY_COVERAGE_OUT"] = str(coverage_json)
        if collect_json is not None:  # tools/runner/child/_ferry_collect.py: the node ids, and nothing run
            env["PYTEST_ADDOPTS"] += " --collect-only -p _ferry_collect"
            env["FERRY_COLLECT_OUT"] = str(collect_json)
    return env
