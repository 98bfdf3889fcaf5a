"""Runs untrusted code in isolation. Imports the standard library only.

``create_workspace`` makes the private copy, ``run_in_sandbox`` runs a command in it,
``isolation.detect`` says which isolation level this machine allows.
"""

from sandbox.execute import SandboxResult, run_in_sandbox
from sandbox.isolation import IsolationInfo, SandboxUnavailable, choose, detect
from sandbox.limits import Limits
from sandbox.workspace import Workspace, WorkspaceError, create_workspace

__all__ = [
    "IsolationInfo",
    "Limits",
    "SandboxResult",
    "SandboxUnavailable",
    "Workspace",
    "WorkspaceError",
    "choose",
    "create_workspace",
    "detect",
    "run_in_sandbox",
]
