"""Warm starts for the runner: a pre-imported interpreter per kind of run (``sandbox.warm``).

``prewarm(seed)`` starts, for the runs to come, one interpreter that has imported torch (and
nothing device-specific); ``warm_start_for`` hands a run to it when the run is one it can take: a
plain ``python``/console-script command and the same static environment (seed, caller
variables). The CPU reference run and the tpx runs fork from the same interpreter. Everything
else, and every run when nothing was prewarmed, starts cold as before. ``FERRY_WARM_RUNS=0``
turns warm starts off.

Per run, the forked interpreter gets the run's environment and calls the bootstrap's
``ferry_after_fork``: loads the run's device backend (tpx), seeds again and installs the CUDA
redirect and the probe/profile hooks the run asked for: what a fresh interpreter's bootstrap does
right after ``import torch``, so a warm run computes and records what a cold one does.
"""

from __future__ import annotations

import atexit
import logging
import os
import sys
import threading
from pathlib import Path

from sandbox import WarmServer, WarmStart, python_spec
from sandbox.env import scrubbed_env
from sandbox.envvars import env_enabled
from sandbox.execute import RUN_MARKER_ENV
from sandbox.isolation import SandboxUnavailable, choose
from sandbox.teardown import STACKS_DIR_ENV, STACKS_SIGNAL_ENV
from sandbox.warm import static_key
from tools.runner.env import child_env, child_path_env
from tools.runner.launch import REDIRECT_COUNT_ENV, TPX_COUNT_ENV

logger = logging.getLogger(__name__)

WARM_ENV = "FERRY_WARM_RUNS"
PRELOAD = ("torch",)
AFTER_FORK = "sitecustomize:ferry_after_fork"
# FERRY_WARM_SERVER is the servers' own: their bootstrap then leaves the CUDA redirect for after the fork.
WARM_SERVER_ENV = "FERRY_WARM_SERVER"
# Read by the bootstrap only after the fork (device backend, redirect, probe, profile) or by
# pytest at its start: one server serves the CPU reference run and the tpx runs alike.
PER_RUN_KEYS = frozenset({RUN_MARKER_ENV, WARM_SERVER_ENV, "FERRY_DEVICE", "TORCH_DEVICE_BACKEND_AUTOLOAD",
                          "TPX_EXTENSION_DIR", "FERRY_REDIRECT_CUDA", "FERRY_REDIRECT_LOG", "FERRY_PROBE_DIR",
                          "FERRY_PROFILE_DIR", "FERRY_WORKSPACE", "PYTEST_ADDOPTS", "FERRY_REDIRECT_AUTOCAST",
                          "FERRY_PROBE_END",  # an evidence run's (agent.migration.nodes.evidence): read by the probe
                          "FERRY_STARTUP_FILE",  # the run's start-up breakdown (tools.runner.api)
                          "FERRY_COLLECT_OUT",  # a collect-only run's list (_ferry_collect, read by pytest)
                          # the run's device counts (tools.runner.launch.device_env): read when tpx loads and
                          # at each redirected device_count() call, both after the fork
                          TPX_COUNT_ENV, REDIRECT_COUNT_ENV,
                          # the teardown watch (sandbox.teardown): registered by the after-fork hook
                          STACKS_DIR_ENV, STACKS_SIGNAL_ENV})
MAX_SERVERS = 4  # kinds of run (seed, caller variables) kept warm at once

EnvKey = tuple[tuple[str, str], ...]  # a server's static environment (sandbox.warm.static_key)
_servers: dict[EnvKey, WarmServer] = {}
_lock = threading.Lock()


def enabled() -> bool:
    return env_enabled(WARM_ENV)


def _key(env: dict[str, str]) -> EnvKey:
    return static_key(env, PER_RUN_KEYS)


def _sandbox_env(extra: dict[str, str]) -> dict[str, str]:
    return scrubbed_env(dict(os.environ), extra, path=child_path_env())


def server_env(seed: int, caller_env: dict[str, str] | None = None) -> dict[str, str]:
    """A server's own environment: a CPU run's (no device backend loaded before the fork), never with
    any of the user's variables (the server is a host process, started before any sandbox)."""
    env = child_env(workspace=Path("/"), device="cpu", redirect_cuda=None, seed=seed, redirect_log=None,
                    probe_dir=None, profile_dir=None, junit_xml=None, caller_env=dict(caller_env or {}))
    return {**_sandbox_env(env), WARM_SERVER_ENV: "1"}


def prewarm(seed: int = 0, caller_env: dict[str, str] | None = None,
            user_env: dict[str, str] | None = None) -> bool:
    """Start (once) a warm interpreter for runs with ``seed`` and these caller variables; False when warm
    starts are off or cannot be used here (no bubblewrap), or when all ``MAX_SERVERS`` kept are serving
    runs (these runs start cold), or when the runs have variables of the user's (``cold_reason``)."""
    if not enabled() or cold_reason(user_env or {}) is not None:
        return False
    try:
        if choose(None).level != "bwrap":
            return False
    except SandboxUnavailable:
        return False
    env = server_env(seed, caller_env)
    key = _key(env)
    with _lock:
        server = _servers.get(key)
        if server is not None and server.alive():
            return True
        while len(_servers) >= MAX_SERVERS:
            # the oldest idle one goes; closing one that serves a run would kill the run
            idle = [k for k, s in _servers.items() if not s.alive()] or [k for k, s in _servers.items() if not s.busy()]
            if not idle:
                logger.info("no warm interpreter for seed %d: all %d kept are serving runs", seed, len(_servers))
                return False
            _servers.pop(idle[0]).close()
        _servers[key] = WarmServer(env, list(PRELOAD), after_fork=AFTER_FORK, dynamic_keys=PER_RUN_KEYS)
    logger.info("warm interpreter started (seed %d)", seed)
    return True


def cold_reason(user_env: dict[str, str]) -> str | None:
    """Why runs with the user's variables ``user_env`` cannot start warm, or None.

    A warm interpreter reads its environment when it starts, on the host, before any sandbox: the
    user's variables may reach only the sandboxed program, so a run with any of them starts cold."""
    if user_env:
        names = ", ".join(sorted(user_env)[:5]) + (", ..." if len(user_env) > 5 else "")
        return (f"the run sets variables of its own (--env {names}), which reach only the sandboxed program; "
                "a warm interpreter, started on the host before the run, never gets them: it starts cold")
    return None


def warm_start_for(command: str, run_env: dict[str, str]) -> WarmStart | None:
    """The warm start for this run, or None when it starts cold."""
    if not enabled() or not _servers:
        return None
    key = _key(_sandbox_env(run_env))
    with _lock:
        server = _servers.get(key)
    if server is None or not server.alive():
        return None
    spec = python_spec(command, child_path_env(), sys.executable)
    if spec is None:
        logger.debug("cold start: %r is not a plain python invocation", command)
        return None
    return WarmStart(server, spec)


@atexit.register
def shutdown() -> None:
    with _lock:
        servers = list(_servers.values())
        _servers.clear()
    for server in servers:
        server.close()
