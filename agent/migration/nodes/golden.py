"""The fp32 "golden" run: the original code on CPU, CUDA redirected to CPU, probe on, autocast off.

docs/numerics.md's error-ratio check, R = ||target - golden|| / ||reference - golden||, needs it: under
autocast the reference (CPU, reduced precision) and the target (tpx, reduced precision) each carry
their own rounding error, and a target is as right as the reference when it is no farther from the
fp32 result than the reference is. A run costs, so it is made only for a program that computes
under a CUDA autocast (the reference's redirect log says so): started beside the rest when the
reference settles and a core is free (:func:`start_golden`), joined or run by the parity node only
when parity fails without it (:func:`golden_for`), and cancelled when parity passes without it.
Its result is kept in the state (``golden``): a second parity round reuses it.
"""

from __future__ import annotations

import logging
import threading
from pathlib import Path

from agent.migration import adapters, run_cache
from agent.migration.budget import has_time_for, run_timeout
from agent.migration.nodes.common import artifacts_dir
from agent.migration.records import RunRecord
from agent.migration.runs import RunScheduler, finished
from agent.migration.state import (
    MigrationOptions,
    MigrationState,
    dump,
    golden_of,
    migration_id_of,
    options_of,
    reference_of,
)
from tools.probe.config import DEFAULT_MAX_BYTES
from tools.runner.models import RunResult

logger = logging.getLogger(__name__)

LABEL = "golden"
# read by the CUDA redirect (tools.redirect.install.autocast_disabled): every CUDA autocast runs disabled;
# its tensors are float32 where the reference's are float16/bfloat16, so its probe gets twice the byte
# budget (else it stops before the later steps the reference recorded, and those get no error ratio)
GOLDEN_ENV = {"FERRY_REDIRECT_AUTOCAST": "off", "FERRY_PROBE_MAX_BYTES": str(2 * DEFAULT_MAX_BYTES)}


def golden_key(state: MigrationState) -> str:
    return f"{migration_id_of(state)}:{LABEL}"


def run_golden(opts: MigrationOptions, adir: Path, cancel: threading.Event | None,
               timeout_s: float | None = None) -> RunResult:
    """The original on CPU exactly as the reference runs, with its CUDA autocast regions disabled
    (``timeout_s``: default ``--run-timeout``; the callers pass what the wall-time budget leaves)."""
    return adapters.run(
        Path(opts.source), opts.run_command, device="cpu", redirect_cuda="cpu", probe=True, profile=False,
        timeout_s=opts.run_timeout_s if timeout_s is None else timeout_s, seed=opts.seed, artifacts_dir=adir,
        env=dict(GOLDEN_ENV), cancel=cancel,
        disk_limit_bytes=opts.disk_limit_bytes, environment=adapters.RunEnvironment.of(opts),
    )


def wants_golden(state: MigrationState) -> bool:
    """Whether the reference computed under a CUDA autocast (so reference and target both carry
    reduced-precision error, and only an fp32 run tells which is closer to the truth)."""
    ref = reference_of(state)
    return ref is not None and ref.ok and adapters.cuda_autocasts(ref) > 0


def start_golden(state: MigrationState, runs: RunScheduler) -> bool:
    """Start the golden run in the background when it may be wanted and a core is free; True when
    it is (now) in flight."""
    if golden_of(state) is not None or not wants_golden(state):
        return False
    key = golden_key(state)
    if runs.has(key):
        return True
    adir = artifacts_dir(state, LABEL)
    opts = options_of(state)
    if finished(adir) is not None or run_cache.kept(opts, LABEL, adir, GOLDEN_ENV) is not None:
        return False  # (a kept one now reads as finished)
    if runs.spare_cores() < 1:
        return False
    adir.mkdir(parents=True, exist_ok=True)
    timeout = run_timeout(state)
    return runs.start(key, lambda cancel: run_golden(opts, adir, cancel, timeout))


def cancel_golden(state: MigrationState, runs: RunScheduler) -> None:
    """Parity passed without it: the background golden run is not needed (yet)."""
    runs.cancel(golden_key(state))


def golden_for(state: MigrationState, runs: RunScheduler) -> tuple[RunResult | None, list[dict[str, object]]]:
    """The golden run for a failed parity check (already in the state, joined from the background,
    found finished on disk, or run now), and the run records to add; (None, []) when the program
    does not compute under autocast."""
    known = golden_of(state)
    if known is not None:
        return known, []
    if not wants_golden(state):
        return None, []
    adir = artifacts_dir(state, LABEL)
    opts = options_of(state)
    run = runs.join(golden_key(state), adir) or run_cache.kept(opts, LABEL, adir, GOLDEN_ENV)
    if run is None:
        logger.info("parity failed under autocast: the fp32 golden run (autocast off) runs now")
        if not has_time_for(state, "reference"):  # it takes what the reference took
            return None, []
        run = run_golden(opts, adir, None, run_timeout(state))
    reused = run_cache.reused_from(run.artifacts_dir) is not None
    if not reused:
        run_cache.keep(opts, LABEL, run, migration_id_of(state), GOLDEN_ENV)
    return run, [dump(RunRecord.of("golden", run, reused=reused))]
