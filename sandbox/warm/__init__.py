"""Warm starts: a sandboxed Python run that skips the interpreter's heavy imports.

A run's cost is often mostly ``import torch`` (about 2 s here) before the first line of the
user's program does anything. A ``WarmServer`` is one interpreter, started with the runs'
static environment, that imports those modules once (``preload``) and then forks for each run.

Isolation is the cold run's, unchanged: bubblewrap still builds the run's sandbox (same mounts,
namespaces, private /tmp, no network, limits), holding a placeholder shell; the forked process
joins exactly those namespaces, forks once more into the run's pid namespace, takes the run's
stdout/stderr, rlimits, uid, environment and working directory, gives up every capability and
runs the invocation (``sandbox.warm.child``). Killing the sandbox (timeout, cancel, Ctrl-C) kills
the command with it: it lives in the sandbox's pid namespace.

Only plain ``python`` invocations qualify (``sandbox.warm.command``) and only under bubblewrap;
whatever goes wrong before the user's code starts (server not ready, namespaces refused,
placeholder gone) falls back to the cold start, logged, never a failed run.

The modules: ``server`` (the host's side: ``WarmServer``, ``start_warm``), ``serve`` (the server
process: preloads, then forks per request), ``child`` (the forked side: enters the run's sandbox
and runs the invocation), ``nsjoin`` (joining namespaces, giving up privileges) and ``command``
(which commands qualify: ``python_spec``). The server process starts as ``python -c`` importing
``sandbox.warm.serve`` by name, and a forked run drops every ``sandbox`` module from
``sys.modules`` before user code (``child._forget_server_modules``): keep both in step with a move.
"""

from sandbox.warm.command import PythonSpec, python_spec
from sandbox.warm.server import WarmServer, WarmUnavailable, start_warm, static_key

__all__ = ["PythonSpec", "WarmServer", "WarmUnavailable", "python_spec", "start_warm", "static_key"]
