"""Runs untrusted code in isolation. Imports the standard library only.

``create_workspace`` makes the private copy, ``run_in_sandbox`` runs a command in it (cold, or
forked from a ``WarmServer`` that imported the heavy modules once), ``isolation.detect`` says
which isolation level this machine allows. ``open_run_space`` makes the size-limited tmpfs that
holds all a run may write (its disk cap); ``cgroups.detect_control`` says whether memory and
processes are capped for a whole run here.
"""

from sandbox.execute import SandboxResult, WarmStart, run_in_sandbox
from sandbox.isolation import IsolationInfo, SandboxUnavailable, choose, detect
from sandbox.limits import Limits
from sandbox.runspace import RunSpace, open_run_space
from sandbox.warm import PythonSpec, WarmServer, python_spec
from sandbox.workspace import Workspace, WorkspaceError, create_workspace

__all__ = [
    "IsolationInfo",
    "Limits",
    "PythonSpec",
    "RunSpace",
    "SandboxResult",
    "SandboxUnavailable",
    "WarmServer",
    "WarmStart",
    "Workspace",
    "WorkspaceError",
    "choose",
    "create_workspace",
    "detect",
    "open_run_space",
    "python_spec",
    "run_in_sandbox",
]
