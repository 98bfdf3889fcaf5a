"""Runs untrusted code in isolation. Imports the standard library only.

``create_workspace`` makes the private copy, ``run_in_sandbox`` runs a command in it (cold, or
forked from a ``WarmServer`` that imported the heavy modules once), ``isolation.detect`` says
which isolation level this machine allows. ``open_run_space`` makes the size-limited tmpfs that
holds all a run may write (its disk cap); ``cgroups.detect_control`` says whether memory and
processes are capped for a whole run here.

The names below are imported when first used: the sandboxed child's probe and profile hooks
import ``sandbox.envvars`` at every probed start, and must not pay for the whole package (~80 ms).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from sandbox.execute import SandboxResult, WarmStart, run_in_sandbox
    from sandbox.isolation import IsolationInfo, SandboxUnavailable, choose, detect
    from sandbox.limits import Limits
    from sandbox.runspace import RunSpace, open_run_space
    from sandbox.warm import PythonSpec, WarmServer, python_spec
    from sandbox.workspace import Workspace, WorkspaceError, create_workspace

_EXPORTS = {
    "SandboxResult": "sandbox.execute", "WarmStart": "sandbox.execute", "run_in_sandbox": "sandbox.execute",
    "IsolationInfo": "sandbox.isolation", "SandboxUnavailable": "sandbox.isolation", "choose": "sandbox.isolation",
    "detect": "sandbox.isolation", "Limits": "sandbox.limits", "RunSpace": "sandbox.runspace",
    "open_run_space": "sandbox.runspace", "PythonSpec": "sandbox.warm", "WarmServer": "sandbox.warm",
    "python_spec": "sandbox.warm", "Workspace": "sandbox.workspace", "WorkspaceError": "sandbox.workspace",
    "create_workspace": "sandbox.workspace",
}

__all__ = [
    "IsolationInfo", "Limits", "PythonSpec", "RunSpace", "SandboxResult", "SandboxUnavailable", "WarmServer",
    "WarmStart", "Workspace", "WorkspaceError", "choose", "create_workspace", "detect", "open_run_space",
    "python_spec", "run_in_sandbox",
]


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'sandbox' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value
