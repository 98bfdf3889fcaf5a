"""Scale-out on Ray (``ferry eval --ray ADDRESS|local``; the optional ``ray`` extra).

Each case is one Ray task declaring the resources a migration uses (one CPU; its sandboxed runs
are children of the task's process), running the same ``run_case`` as a local run (the harness hands
each case's run in); results come back as each task finishes (``ray.wait``) and are recorded at once,
so a run sees its progress and keeps what finished if it is stopped.
"""

from __future__ import annotations

import logging
import socket
from collections.abc import Callable, Mapping
from typing import Any

from evals.results import CaseResult

CaseTask = Callable[[], CaseResult]  # one case's run (the harness's run_case with its arguments)

logger = logging.getLogger(__name__)


class RayUnavailable(RuntimeError):
    """Ray is not installed, or the cluster cannot be reached."""


def _ray() -> Any:
    try:
        import ray
    except ImportError as exc:
        raise RayUnavailable("--ray needs Ray: install Ferry's ray extra (pip install -e '.[ray]')") from exc
    return ray


def _task(run: CaseTask) -> str:
    return run().model_dump_json()


def _reachable(address: str, timeout_s: float = 10.0) -> None:
    """Fail at once, with the reason, when nothing answers at HOST:PORT (ray.init would retry for
    minutes). Ray's own schemes (``ray://``) are left to Ray."""
    if "://" in address:
        return
    host, sep, port = address.rpartition(":")
    if not sep or not port.isdigit():
        raise RayUnavailable(f"--ray {address!r} is not HOST:PORT (the cluster's GCS address), 'local' or 'auto'")
    try:
        socket.create_connection((host.strip("[]"), int(port)), timeout=timeout_s).close()
    except OSError as exc:
        raise RayUnavailable(f"cannot reach the Ray cluster at {address}: {exc.strerror or exc}; start it "
                             "(ray start --head) or give its address, or use --ray local") from exc


def run_on_ray(address: str, tasks: Mapping[str, CaseTask], failed: Callable[[str, str], CaseResult],
               done: Callable[[CaseResult], None], *, jobs: int = 1) -> list[CaseResult]:
    """Run each case's task (name -> the case's run, a picklable callable) as a Ray task; a task that fails
    becomes ``failed(name, reason)``. ``done`` is called with each result as it comes back."""
    ray = _ray()
    started_here = not ray.is_initialized()
    if started_here and address not in ("local", "auto"):
        _reachable(address)
    try:
        if started_here:
            if address == "local":
                ray.init(num_cpus=max(1, jobs), include_dashboard=False, log_to_driver=False)
            else:
                ray.init(address=address, log_to_driver=False)
    except Exception as exc:
        raise RayUnavailable(f"cannot reach the Ray cluster at {address}: {exc}") from exc
    try:
        remote = ray.remote(num_cpus=1, max_retries=0)(_task)
        refs = {remote.remote(task): name for name, task in tasks.items()}
        results: list[CaseResult] = []
        pending = list(refs)
        while pending:
            ready, pending = ray.wait(pending, num_returns=1)
            for ref in ready:
                try:
                    result = CaseResult.model_validate_json(ray.get(ref))
                except Exception as exc:
                    result = failed(refs[ref], f"the Ray task failed: {type(exc).__name__}: {exc}")
                results.append(result)
                done(result)
        return results
    finally:
        if started_here:
            ray.shutdown()
