"""The first target run as evidence: the plain code on tpx ended after its recorded steps, FIX008's run beside it.

Most float32 programs fail parity on their first target run only because tpx multiplies float32 in bf16 unless
'highest' is asked for; the precision trial then runs the code with FIX008 written in (``causes.measure``), the
policy applies FIX008, and that run is the next round's target run. The first round's full plain run only told
that parity fails. Where the trial would apply (no FIX008 in the edits, the policy would write one), the program
is one process and computes under no CUDA autocast (those have their own golden/autocast candidate),
``target_run`` makes instead (:func:`speculate`):

* an **evidence run**: the plain code on tpx, probed, not profiled, ended by the probe once its recorded steps
  are done (``FERRY_PROBE_END=1``; the runner's status ``ended``), and
* the **FIX008 run** (the trial's run: its private copy, probed and profiled) started beside it, with that
  round's tests and CPU check where cores are free (else as soon as the evidence run ends).

``parity`` compares the evidence run's recorded steps with the reference (:func:`pending`). When they fail, the
precision trial joins the FIX008 run (no new run) and all after is as before. When they pass, or the FIX008 run
does not remove the divergence, or the policy then proposes anything but FIX008, the runs started for FIX008 that
are no longer of use are cancelled and the graph goes back to ``target_run`` for the full plain run
(:func:`decline`); from there the migration goes exactly as without the evidence run. The evidence run is never
a target run: it is not ``target_ok``, has no profile, and a resumed migration reads it only as evidence.

One process, no autocast: the run command names no torchrun / ``torch.distributed`` launcher, and neither the
command, the files the migration changed, the entry file nor the scan's findings mention ``torch.distributed``,
``init_process_group``, ``DistributedDataParallel``, ``torch.multiprocessing``, ``spawn(``, ``autocast``,
``GradScaler`` or ``amp``'s modules (:data:`NOT_ONE_PLAIN_PROCESS`).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from pathlib import Path

from agent.migration import adapters
from agent.migration.budget import has_time_for, run_timeout
from agent.migration.entry import entry_file
from agent.migration.nodes import causes
from agent.migration.nodes.common import SUMMARY, Update, artifacts_dir, source_of
from agent.migration.paths import workspaces_root
from agent.migration.records import PreparedRun, RunRecord, Speculation
from agent.migration.runs import RunScheduler, finished, parallel_limit
from agent.migration.state import (
    MigrationState,
    dump,
    files_of,
    iteration_of,
    migration_id_of,
    options_of,
    runs_of,
    scan_of,
    speculation_of,
)
from agent.migration.workspace import code_digest, materialise
from sandbox.envvars import env_enabled
from tools.patch import list_source_files
from tools.runner.models import RunResult

logger = logging.getLogger(__name__)

SWITCH_ENV = "FERRY_EVIDENCE_RUN"  # 0/false/off: the first target run is always the full plain run
END_ENV = {"FERRY_PROBE_END": "1"}  # tools/probe/config.py: end the program after its recorded steps
NOT_ONE_PLAIN_PROCESS = ("torchrun", "torch.distributed", "init_process_group", "DistributedDataParallel",
                         "torch.multiprocessing", "spawn(", "autocast", "GradScaler", "torch.amp", "cuda.amp")
MAX_ENTRY_BYTES = 1 << 20
# what start_beside (agent.migration.nodes.target) starts for a round: cancelled with a FIX008 round not taken
BESIDE_ROLES = ("tests", "cpu-check")


def fix_state(state: MigrationState, fix: tuple[str, str]) -> MigrationState:
    """The next round's state as the policy would leave it with FIX008 applied (what the FIX008 run ran)."""
    rel, text = fix
    return {**state, "files": {**files_of(state), rel: text}, "iteration": iteration_of(state) + 1,
            "workspace": None}


def one_plain_process(state: MigrationState) -> str | None:
    """None when the program runs as one process under no CUDA autocast as far as its command, the files the
    migration changed, its entry file and the scan's findings tell; else what says otherwise."""
    opts = options_of(state)
    texts = [opts.run_command, *files_of(state).values()]
    scan = scan_of(state)
    if scan is not None:
        texts += [f"{f.rule} {f.message}" for f in scan.findings]
    try:
        entry = entry_file(opts.run_command, list_source_files(source_of(state)), opts.cwd)
        if entry is not None and entry not in files_of(state):
            path = source_of(state) / entry
            if path.is_file() and path.stat().st_size <= MAX_ENTRY_BYTES:
                texts.append(path.read_text(encoding="utf-8", errors="replace"))
    except OSError as exc:
        return f"the entry file could not be read ({exc})"
    for marker in NOT_ONE_PLAIN_PROCESS:
        if any(marker in text for text in texts):
            return marker
    return None


def wanted(state: MigrationState) -> bool:
    """Whether the first target run is to be made as evidence: no target or evidence run made yet, the precision
    trial would apply (no FIX008 in the code), one process, no autocast, time for both runs, side-by-side runs on
    (``FERRY_EVIDENCE_RUN=0`` switches evidence runs off; ``FERRY_PARALLEL_RUNS=1`` too: the FIX008 run goes
    beside the evidence run). Whether the policy would write FIX008 is :func:`speculate`'s to find out."""
    if not env_enabled(SWITCH_ENV):
        return False
    if parallel_limit() < 2:  # FERRY_PARALLEL_RUNS=1: nothing runs beside the foreground run, the FIX008 run neither
        return False
    if speculation_of(state) is not None or any(r.kind in ("target", "evidence") for r in runs_of(state)):
        return False
    if causes.precision_in_code(state):
        return False
    why = one_plain_process(state)
    if why is not None:
        logger.info("no evidence run: the program mentions %r (several processes or autocast)", why)
        return False
    return has_time_for(state, "target") and has_time_for(state, "cause_trial")


def speculate(state: MigrationState, runs: RunScheduler, ws: Path,
              beside: Callable[[MigrationState, Path], list[str]]) -> Update:
    """Make the evidence run of ``ws`` (this round's code) and, beside it, the FIX008 run (with its round's tests
    and CPU check where cores are free); the update that records both. The evidence run starts first: FIX008 is
    written (libcst, a few tenths of a second) while it runs. Where the policy would not write FIX008 the evidence
    run is cancelled and the update is empty (the caller makes the full plain run). Where the evidence run neither
    ended after its steps nor ran to its end, what was started for FIX008 is cancelled and the evidence is
    ``declined``: its failure is the full plain run's to show. Where no core was free for the FIX008 round's tests
    and CPU check beside the two runs, they start when the evidence run ends, while parity judges it: that round
    is next wherever the evidence fails parity, and what was started for it is cancelled where it passes.
    ``beside(next_state, workspace)``: ``target.start_beside``."""
    opts = options_of(state)
    it = iteration_of(state)
    ev_key, ev_dir = f"{migration_id_of(state)}:evidence-{it}", artifacts_dir(state, f"evidence-{it}")

    def evidence_run(cancel: threading.Event) -> RunResult:
        return adapters.run(ws, opts.run_command, device="tpx", redirect_cuda=None, probe=True, profile=False,
                            timeout_s=run_timeout(state), seed=opts.seed, env=dict(END_ENV), artifacts_dir=ev_dir,
                            cancel=cancel, disk_limit_bytes=opts.disk_limit_bytes)

    runs.start(ev_key, evidence_run)
    fix = causes.precision_fix(state)
    if fix is None:
        runs.cancel(ev_key)
        runs.join(ev_key, ev_dir)  # ended before the full plain run starts
        logger.info("no evidence run: the policy would not write FIX008 for this code")
        return {}
    nxt = fix_state(state, fix)
    fix_files = files_of(nxt)
    fix_ws = materialise(Path(opts.source), None, fix_files, workspaces_root(opts.state_dir, migration_id_of(state)))
    fix_dir = artifacts_dir(state, f"cause-{it}-matmul_precision-in-code")
    key = f"{migration_id_of(state)}:fix008-{it}"

    def fix_run(cancel: threading.Event) -> RunResult:
        return adapters.run(fix_ws, opts.run_command, device="tpx", redirect_cuda=None, probe=True, profile=True,
                            timeout_s=run_timeout(state), seed=opts.seed, artifacts_dir=fix_dir, cancel=cancel,
                            disk_limit_bytes=opts.disk_limit_bytes)

    runs.start(key, fix_run)
    started = beside(nxt, fix_ws)
    runs.prewarm_imports()  # parity needs torch in this process next: imported while the runs go on
    joined = runs.join(ev_key, ev_dir)
    run = joined if joined is not None else _cancelled(opts.run_command)
    record = dump(RunRecord.of("evidence", run))
    spec = Speculation(files_digest=code_digest(files_of(state)), run=run, fix_file=fix[0], fix_text=fix[1],
                       fix_digest=code_digest(fix_files), fix_workspace=str(fix_ws), fix_key=key, fix_dir=str(fix_dir))
    after: list[str] = []
    if run.status in ("ended", "ok") and run.probe_dir is not None:
        # its core is free: the FIX008 round's tests and CPU check take it while parity judges the evidence
        # (most float32 programs fail it: that round is next); cancelled with the FIX008 run if it passes
        after = [what for what in beside(nxt, fix_ws) if what not in started]
    if run.status not in ("ended", "ok") or run.probe_dir is None:
        _cancel_fix(state, runs, spec)
        reason = f"the evidence run failed ({run.failure_line()}): the full plain run shows it"
        logger.info("%s", reason)
        return {"runs": [record], "speculation": dump(spec.model_copy(update={"phase": "declined",
                                                                             "reason": reason}))}
    said = (f"ended by the probe after its {run.ended_after_steps} recorded steps" if run.status == "ended"
            else "ran to its end before its recorded steps were done")
    what = ", ".join(["the FIX008 code's full run", *started])
    then = f"; as it ended: {', '.join(after)}" if after else ""
    return {"runs": [record], "speculation": dump(spec), "last_phase": "run", "prepared_target": None,
            SUMMARY: f"evidence run of the plain code (probed, not profiled) {said} in {run.duration_s:.1f}s "
                     f"({what} started beside it{then})"}


def _cancelled(command: str) -> RunResult:
    """What stands for an evidence run cancelled before its end (the migration was stopped): it shows nothing."""
    return RunResult(command=["/bin/sh", "-c", command], exit_code=None, status="cancelled", duration_s=0.0,
                     stdout_tail="", stderr_tail="the run was cancelled", isolation="none")


def _this_round(state: MigrationState) -> Speculation | None:
    """The evidence run made for exactly this round's code (``edges.evidence_phase`` routes on the same)."""
    spec = speculation_of(state)
    if spec is None or spec.files_digest != code_digest(files_of(state)):
        return None
    return spec


def pending(state: MigrationState) -> Speculation | None:
    """The evidence run parity is to judge: made for exactly this round's code and not judged yet."""
    spec = _this_round(state)
    return spec if spec is not None and spec.phase == "pending" else None


def declined(state: MigrationState) -> Speculation | None:
    """An evidence run whose round still needs its full plain run (``target_run`` makes it now)."""
    spec = _this_round(state)
    return spec if spec is not None and spec.phase == "declined" else None


def start_fix_round(state: MigrationState, spec: Speculation,
                    beside: Callable[[MigrationState, Path], list[str]]) -> list[str]:
    """The evidence failed: start the FIX008 round's tests and CPU check (``beside``: ``target.start_beside`` with no
    run of the caller's own: it is about to wait for the FIX008 run) where they are not running yet."""
    return beside(fix_state(state, (spec.fix_file, spec.fix_text)), Path(spec.fix_workspace))


def joined_fix(state: MigrationState, runs: RunScheduler) -> PreparedRun | None:
    """The FIX008 run started beside the evidence run, as the precision trial takes it: waited for where it is
    still running, found on disk where an earlier process made it, kept in the state once joined; None where
    there is none (cancelled, never finished, or made for other code)."""
    spec = _this_round(state)
    if spec is None:
        return None
    run = spec.fix_run
    if run is None:
        run = runs.join(spec.fix_key, Path(spec.fix_dir)) or finished(Path(spec.fix_dir))
    if run is None:
        return None
    return PreparedRun(files_digest=spec.fix_digest, workspace=spec.fix_workspace, run=run)


def _cancel_fix(state: MigrationState, runs: RunScheduler, spec: Speculation) -> None:
    """Cancel the FIX008 run and what was started beside it for the FIX008 round (its tests, CPU check)."""
    runs.cancel(spec.fix_key)
    mid = migration_id_of(state)
    for role in BESIDE_ROLES:  # round_label of the FIX008 round's code
        runs.cancel(f"{mid}:{role}-{iteration_of(state) + 1}-{spec.fix_digest[:12]}")


def decline(state: MigrationState, runs: RunScheduler, spec: Speculation, reason: str,
            fix: PreparedRun | None = None) -> Update:
    """The evidence cannot settle this round: cancel what was started for FIX008 (keeping a finished FIX008 run,
    ``fix``, for the full round's precision trial) and send the graph back to ``target_run`` for the full plain
    run. Nothing of the evidence run is kept as parity's verdict."""
    _cancel_fix(state, runs, spec)  # a FIX008 run joined already is no job any more: only its tests and CPU check
    spec = spec.model_copy(update={"phase": "declined", "reason": reason,
                                   "fix_run": fix.run if fix is not None else None})
    logger.info("evidence run declined: %s", reason)
    return {"speculation": dump(spec), "parity": None, "proposal": None, "diagnosis": None,
            SUMMARY: f"{reason}: the full plain target run is made now"}


def settle(spec: Speculation) -> Update:
    """The round's target run is made (or FIX008 taken from its run): the evidence is settled."""
    return {"speculation": dump(spec.model_copy(update={"phase": "done"}))}
