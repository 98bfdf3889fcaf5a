"""Scale-out on Ray (``ferry eval --ray ADDRESS|local``; the optional ``ray`` extra).

Each case is one Ray task declaring the resources a migration uses (one CPU; its sandboxed runs
are children of the task's process), running the same ``run_case`` as a local run; results come
back as each task finishes (``ray.wait``) and are recorded at once, so a run sees its progress and
keeps what finished if it is stopped.
"""

from __future__ import annotations

import logging
import socket
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from evals.cases import Suite
from evals.prices import Prices
from evals.results import CaseResult

if TYPE_CHECKING:
    from evals.harness import LLMSettings

logger = logging.getLogger(__name__)


class RayUnavailable(RuntimeError):
    """Ray is not installed, or the cluster cannot be reached."""


def _ray() -> Any:
    try:
        import ray
    except ImportError as exc:
        raise RayUnavailable("--ray needs Ray: install Ferry's ray extra (pip install -e '.[ray]')") from exc
    return ray


def _task(case_json: str, suite: str, out_root: str, policy: str, prices_json: str, llm_json: str | None,
          mirror: str | None) -> str:
    from pydantic import TypeAdapter

    from evals.cases import Case
    from evals.harness import LLMSettings, run_case

    case = TypeAdapter(Case).validate_json(case_json)
    llm = LLMSettings.model_validate_json(llm_json) if llm_json else None
    result = run_case(case, suite, Path(out_root), policy, Prices.model_validate_json(prices_json), llm,  # type: ignore[arg-type]
                      Path(mirror) if mirror else None)
    return result.model_dump_json()


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


def run_on_ray(address: str, suite: Suite, out_root: Path, policy: str, prices: Prices, llm: LLMSettings | None,
               mirror: Path | None, done: Callable[[CaseResult], None], *, jobs: int = 1) -> list[CaseResult]:
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
        refs = {remote.remote(c.model_dump_json(by_alias=True), suite.name, str(out_root), policy,
                              prices.model_dump_json(), llm.model_dump_json() if llm is not None else None,
                              str(mirror) if mirror else None): c.name
                for c in suite.cases}
        results: list[CaseResult] = []
        pending = list(refs)
        while pending:
            ready, pending = ray.wait(pending, num_returns=1)
            for ref in ready:
                try:
                    result = CaseResult.model_validate_json(ray.get(ref))
                except Exception as exc:
                    from evals.harness import _base

                    name = refs[ref]
                    case = next(c for c in suite.cases if c.name == name)
                    result = CaseResult(**_base(case, suite.name, out_root / name), status="failed_harness",  # type: ignore[arg-type]
                                        grade="failed", reason=f"the Ray task failed: {type(exc).__name__}: {exc}")
                results.append(result)
                done(result)
        return results
    finally:
        if started_here:
            ray.shutdown()
