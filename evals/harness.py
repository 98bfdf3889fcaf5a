"""The eval harness: migrate each case of a suite, grade it, and record what it cost.

Each case runs as its own ``ferry migrate --json`` subprocess with a private state dir (cases are
isolated, can run side by side, and one that fails or hangs never stops the rest), then is graded
(``evals.grading``: the hidden tests on a fresh copy with the patch applied; a real case by its
run and parity). Results go to ``results.jsonl`` as each case finishes; ``evals.report`` turns them
into a leaderboard and an HTML report, ``evals.compare`` compares two runs.
"""

from __future__ import annotations

import functools
import hashlib
import json
import logging
import os
import posixpath
import re
import shutil
import sqlite3
import subprocess
import sys
import time
from collections.abc import Callable
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, Field, ValidationError

from agent.ids import id_problem
from agent.knowledge import KnowledgeError, record_fix
from agent.llm.config import LIMIT_SOURCES, LLMLimits
from agent.migration.device_work import work_problem
from agent.migration.paths import artifacts_root
from agent.migration.records import MigrationRecord
from evals.cases import Case, RealCase, Suite, SyntheticCase, slug
from evals.grading import GradingError, grade
from evals.prices import Prices
from evals.results import RESULTS_FILE, CaseResult, GradedTests, RepoTests, append_result

logger = logging.getLogger(__name__)

Policy = Literal["offline", "llm"]
ProgressFn = Callable[[str, str, str], None]  # (case, event: started|step|finished, detail)


class LLMSettings(BaseModel):
    """The model server a ``--policy llm`` run's migrations use, and its limits, passed to each case's
    ``ferry migrate`` as flags; the API key stays in the environment (FERRY_LLM_API_KEY), never on a
    command line."""

    model: str | None = None
    base_url: str | None = None
    limits: LLMLimits = Field(default_factory=LLMLimits)
    max_cost: float | Literal["none"] | None = Field(default=None, description=(
        "--llm-max-cost of each case's migration (None: $FERRY_LLM_MAX_COST_USD or no cap)"))

    def migrate_args(self) -> list[str]:
        args = ["--llm-model", self.model] if self.model else []
        if self.base_url:
            args += ["--llm-base-url", self.base_url]
        if self.max_cost is not None:
            args += ["--llm-max-cost", str(self.max_cost)]
        for field, (flag, _env) in LIMIT_SOURCES.items():
            args += [flag, str(getattr(self.limits, field))]
        return args


class EvalError(ValueError):
    """The eval cannot run as asked (a missing mirror, an output dir that holds another run)."""


def _ferry(args: list[str], timeout_s: float, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    # -P: the caller's working directory is not put first on the child's sys.path, where a folder of
    # theirs named agent/, tools/ or backend/ (another Ferry checkout, a user's repository) would
    # replace Ferry's own packages in Ferry's own process
    return subprocess.run([sys.executable, "-P", "-m", "agent.cli", *args], capture_output=True, text=True,
                          timeout=timeout_s, env={**os.environ, **(env or {})})


def migration_id(name: str) -> str:
    """The id a case's migration runs under (its own state dir holds only it): a plain name (a digest of
    the case's name when its slug is not one, e.g. too long)."""
    mid = f"eval-{slug(name)}"
    return mid if id_problem(mid) is None else "eval-" + hashlib.sha256(name.encode()).hexdigest()[:16]


def _base(case: Case, suite: str, out: Path, policy: Policy = "offline") -> dict[str, object]:
    return {"suite": suite, "name": case.name, "kind": case.kind, "difficulty": case.difficulty,
            "idiom_groups": case.idiom_groups, "expected_status": case.expected_for(policy), "out_dir": str(out)}


BUDGET_MARGIN_S = 60.0  # of a case's timeout, left to Ferry's own start-up, patch and report


def migrate(case: Case, repo: Path, out: Path, policy: Policy, llm: LLMSettings | None = None,
            python: Path | None = None) -> tuple[MigrationRecord | None, str, float]:
    """``ferry migrate`` of ``repo`` into ``out``: its record (None when it wrote none), a reason when
    it did not end normally, and its wall time. ``llm``: the model's settings under ``--policy llm``;
    ``python``: the interpreter the runs use (``--python``; a real case's own venv)."""
    args = ["migrate", str(repo), "--run", case.run, "--json", "--out", str(out), "--state-dir", str(out / "state"),
            "--id", migration_id(case.name), "--llm" if policy == "llm" else "--offline",
            # Ferry stops before a run that cannot finish, and writes its report, before the harness kills it
            "--max-wall", f"{max(case.timeout_s - BUDGET_MARGIN_S, case.timeout_s / 2):.0f}"]
    if case.test:
        args += ["--test", case.test]
    if python is not None:
        args += ["--python", str(python)]
    if policy == "llm":
        args += (llm or LLMSettings()).migrate_args()
    env = dict(case.env) if isinstance(case, RealCase) else {}
    t0 = time.monotonic()
    try:
        proc = _ferry(args, case.timeout_s, env)
    except subprocess.TimeoutExpired:
        return None, f"the migration exceeded its {case.timeout_s:.0f} s timeout", time.monotonic() - t0
    wall = time.monotonic() - t0
    (out / "migrate.stderr.txt").write_text(proc.stderr, encoding="utf-8")
    try:
        record = MigrationRecord.model_validate_json((out / "result.json").read_text(encoding="utf-8"))
    except (OSError, ValueError, ValidationError) as exc:
        why = proc.stderr.strip().splitlines()[-1] if proc.stderr.strip() else f"exit {proc.returncode}"
        return None, f"no migration result ({type(exc).__name__}): {why}", wall
    return record, "", wall


def _rules(record: MigrationRecord) -> list[str]:
    fired: list[str] = []
    for e in record.edits:
        fired += [r for r in e.rule.split(",") if r] if e.kind == "codemod" else [e.rule]
    return fired


def time_split(record: MigrationRecord) -> tuple[dict[str, float], dict[str, float]]:
    """Where a migration's time went: seconds per node (its steps summed by node name) and the runs'
    own durations summed by role, each rounded to milliseconds, in the order first seen."""
    nodes: dict[str, float] = {}
    for step in record.steps:
        nodes[step.node] = nodes.get(step.node, 0.0) + step.seconds
    runs: dict[str, float] = {}
    for run in record.run_log:
        if not run.reused:  # made earlier in another role: its seconds are counted there
            runs[run.kind] = runs.get(run.kind, 0.0) + run.duration_s
    return {k: round(v, 3) for k, v in nodes.items()}, {k: round(v, 3) for k, v in runs.items()}


def _from_record(record: MigrationRecord, prices: Prices, model: str | None) -> dict[str, object]:
    model = record.llm.model or model
    node_s, run_s = time_split(record)
    before, after = record.guard.tests_before, record.guard.tests_after
    only = record.guard.tests_before_collected
    return {"tests_before": (RepoTests(collected=before.collected, passed=before.passed) if before else
                             RepoTests(collected=only.collected, ran=False) if only else None),
            "tests_after": RepoTests(collected=after.collected, passed=after.passed) if after else None,
            "status": record.status, "parity_passed": record.parity.passed, "iterations": record.iterations,
            "runs": record.runs, "llm_calls": record.llm.calls, "prompt_tokens": record.llm.prompt_tokens,
            "completion_tokens": record.llm.completion_tokens, "model": model if record.llm.calls else None,
            "cost_usd": prices.cost(model, record.llm.prompt_tokens, record.llm.completion_tokens)
            if record.llm.calls else 0.0, "rules_fired": _rules(record), "node_s": node_s, "run_s": run_s}


def _failures(out: Path, name: str) -> list[tuple[str, str]]:
    """(signature kind, "Type: first line") of the failed runs of the case's migration, oldest first
    (their result.json in the migration's artifacts; the reference and CPU-check runs left out)."""
    root = artifacts_root(out / "state", migration_id(name))
    found: list[tuple[float, str, str]] = []
    for path in root.glob("*/result.json"):
        if path.parent.name.startswith(("reference", "golden", "cpu")):
            continue
        try:
            run = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            continue
        trace = run.get("trace") or {}
        if run.get("status") != "ok" and trace.get("exc_type"):
            first = (trace.get("message") or "").strip().splitlines()
            found.append((path.stat().st_mtime, (trace.get("signature") or {}).get("kind") or "other",
                          f"{trace['exc_type']}: {first[0] if first else ''}"))
    return [(kind, exc) for _, kind, exc in sorted(found)]


def record_fixes(name: str, record: MigrationRecord, out: Path) -> int:
    """Record the policy and model edits of the resolved case ``name`` in the knowledge base (``agent.knowledge``:
    the model searches them later as earlier fixes); returns how many. Never fails the case."""
    edits = [e for e in record.edits if e.kind in ("policy", "llm")]
    if not edits:
        return 0
    try:
        patch = (out / "ferry.patch").read_text(encoding="utf-8") if (out / "ferry.patch").is_file() else ""
        sections = {m.group(1): m.group(0) for m in re.finditer(r"^diff --git a/(\S+) .*?(?=^diff --git |\Z)", patch,
                                                                 flags=re.M | re.S)}
        failures = _failures(out, name)
        signature = ", ".join(dict.fromkeys(k for k, _ in failures)) or "other"
        exception = "\n".join(dict.fromkeys(e for _, e in failures))
        for e in edits:
            record_fix(case=name, signature=signature, exception=exception or e.reason,
                       rule=e.rule if e.kind == "policy" else "llm", reason=e.reason,
                       diff="".join(sections.get(f, "") for f in e.files))
    except (OSError, sqlite3.Error, KnowledgeError) as exc:
        logger.warning("case %s: its fixes were not recorded in the knowledge base: %s", name, exc)
        return 0
    return len(edits)


def grade_synthetic(case: SyntheticCase, record: MigrationRecord, out: Path) -> tuple[str, str, GradedTests,
                                                                                      float | None]:
    """(grade, reason, test outcomes, own run seconds) of a migrated synthetic case."""
    patch = (out / "ferry.patch").read_text(encoding="utf-8")
    try:
        graded = grade(case, patch, out / "grading", timeout_s=case.timeout_s)
    except GradingError as exc:
        return "failed", f"{exc.reason}: {exc}", GradedTests(), None
    tests = graded.tests
    reasons = []
    if not tests.f2p_ok:
        reasons.append("fail-to-pass not passing: " + ", ".join(n for n,
                                                                o in tests.fail_to_pass.items() if o != "passed"))
    if not tests.p2p_ok:
        reasons.append("pass-to-pass regressed: " + ", ".join(n for n,
                                                              o in tests.pass_to_pass.items() if o != "passed"))
    if record.parity.passed is not True:
        reasons.append(f"parity {record.parity.verdict or 'not checked'}" +
                       (f" ({record.parity.first_divergence})" if record.parity.first_divergence else ""))
    if not graded.own_run_ok:
        reasons.append("the migrated run command fails on tpx")
    # stopped by a budget, a timeout or the sandbox, or the test guard refused the edit that made the tests
    # pass: whatever its tests say, not done
    ended_failed = record.status.startswith("failed_") or record.status == "guard_refused"
    if ended_failed:
        reasons.append(f"the migration ended {record.status}" + (f" ({record.summary})" if record.summary else ""))
    if not reasons:
        return "resolved", "", tests, graded.own_run_s
    some = any(o == "passed" for o in [*tests.fail_to_pass.values(), *tests.pass_to_pass.values()])
    grade_ = "partial" if (some or graded.own_run_ok) and not ended_failed else "failed"
    return grade_, f"{record.status}: " + "; ".join(reasons), tests, graded.own_run_s


def grade_real(record: MigrationRecord) -> tuple[str, str, float | None]:
    """A real case is resolved when its migrated run passes on tpx, does the program's work there (its
    compute ops: ``agent.migration.device_work.work_problem``) and parity with the original passes.
    The reason of one that is not says which failed, whether the original itself failed on CPU (then
    nothing could be compared), and ends with the migration's own summary (the failure's signature
    and line)."""
    targets = [r for r in record.run_log if r.kind == "target"]
    references = [r for r in record.run_log if r.kind == "reference"]
    ran = bool(targets) and targets[-1].status == "ok" and targets[-1].exit_code == 0
    own = targets[-1].duration_s if ran else None
    # the work on tpx: a run that passes and matches while the program's work stayed on CPU is not a migration
    not_on_device = work_problem(record.device_work) if ran else None
    if ran and record.parity.passed is True and not_on_device is None:
        return "resolved", "", own
    why = [] if ran else [f"the migrated run does not pass on tpx ({targets[-1].status if targets else 'never ran'})"]
    if not_on_device is not None:
        why.append(not_on_device)
    if references and references[-1].status != "ok":
        why.append(f"the original does not run on CPU with CUDA redirected ({references[-1].status})")
    if record.parity.passed is not True:
        why.append(f"parity {record.parity.verdict or 'not checked'}" +
                   (f" (first divergence {record.parity.first_divergence})" if record.parity.first_divergence else ""))
    summary = f" -- {record.summary}" if record.summary else ""
    return ("partial" if ran else "failed"), f"{record.status}: " + "; ".join(why) + summary, own


def grade_control(record: MigrationRecord, expected: str = "partial") -> tuple[str, str, float | None]:
    """A control case (its program holds no CUDA) is resolved when Ferry leaves that program alone and it
    keeps working: the run passes on tpx, parity and the CPU check pass, no patched file lies in the entry
    file's directory, and the migration ends with the case's expected status (``partial``: its work never
    ran on the device, so ``migrated`` would claim more than was shown; a failure is not a pass either)."""
    targets = [r for r in record.run_log if r.kind == "target"]
    ran = bool(targets) and targets[-1].status == "ok" and targets[-1].exit_code == 0
    own = targets[-1].duration_s if ran else None
    why = [] if ran else [f"the run does not pass on tpx ({targets[-1].status if targets else 'never ran'})"]
    if record.entry_file is None:
        why.append("the run's entry file was not found, so its code cannot be shown unchanged")
    else:
        folder = posixpath.dirname(record.entry_file)
        touched = [f.path for f in record.patch_files
                   if (posixpath.dirname(f.path) == folder if not folder else f.path.startswith(folder + "/"))]
        if touched:
            why.append(f"the patch changes the control's own code ({', '.join(touched[:5])})")
    if record.parity.passed is not True:
        why.append(f"parity {record.parity.verdict or 'not checked'}")
    check = record.cpu_check
    if check is None or check.verdict != "pass":
        why.append("the CPU check " + ("did not run" if check is None else f"did not pass ({check.verdict}): "
                                                                             f"{check.reason}"))
    if record.status == "migrated":
        why.append("the verdict claims `migrated` for a program whose work cannot have run on the device")
    elif record.status != expected:
        why.append(f"the migration ended {record.status}, not {expected}")
    if not why:
        return "resolved", "", own
    summary = f" -- {record.summary}" if record.summary else ""
    return ("partial" if ran else "failed"), f"{record.status}: " + "; ".join(why) + summary, own


PHASE_FILE = "phase.txt"  # what a case does outside its migration's steps (its live display reads it)


def set_phase(out: Path, phase: str | None) -> None:
    """Say what the case at ``out`` is doing (None: its migration, whose steps its checkpoints tell)."""
    try:
        if phase is None:
            (out / PHASE_FILE).unlink(missing_ok=True)
        else:
            (out / PHASE_FILE).write_text(phase, encoding="utf-8")
    except OSError as exc:  # the display only: never a case's failure
        logger.debug("case phase not written to %s: %s", out, exc)


def run_case(case: Case, suite: str, out_root: Path, policy: Policy, prices: Prices, llm: LLMSettings | None,
             mirror: Path | None = None) -> CaseResult:
    """Migrate and grade one case; never raises (a broken case is a failed result with its reason)."""
    out = out_root / slug(case.name)
    if out.exists():
        shutil.rmtree(out)
    out.mkdir(parents=True)
    base = _base(case, suite, out, policy)
    t0 = time.monotonic()
    try:
        if isinstance(case, RealCase):
            from evals.real_suite import prepare

            set_phase(out, "preparing: checkout and venv")
            repo, python = prepare(case, mirror, out / "checkout")
        else:
            repo, python = case.repo, None
        set_phase(out, None)  # the migration's own steps, from its checkpoints
        record, why, wall = migrate(case, repo, out, policy, llm, python)
        set_phase(out, "grading: hidden tests" if isinstance(case, SyntheticCase) else "grading")
        if record is None:
            status = "failed_timeout" if "timeout" in why else "failed_harness"
            return CaseResult(**base, status=status, grade="failed", reason=why, wall_s=wall)  # type: ignore[arg-type]
        fields = _from_record(record, prices, llm.model if llm is not None else None)
        if isinstance(case, SyntheticCase):
            g, reason, tests, own = grade_synthetic(case, record, out)
        else:
            g, reason, own = grade_control(record, case.expected_status) if case.control else grade_real(record)
            tests = GradedTests()
        if g == "resolved":
            record_fixes(case.name, record, out)
        return CaseResult(**base, **fields, grade=g, reason=reason, tests=tests, wall_s=round(wall, 3),  # type: ignore[arg-type]
                          own_run_s=own, ratio=round(wall / own, 3) if own else None,
                          patch=str(out / "ferry.patch"))
    except Exception as exc:
        logger.exception("case %s failed in the harness", case.name)
        status = getattr(exc, "status", "failed_harness")
        return CaseResult(**base, status=status, grade="failed", reason=f"{type(exc).__name__}: {exc}",  # type: ignore[arg-type]
                          wall_s=round(time.monotonic() - t0, 3))
    finally:
        set_phase(out, None)


def check_out_dir(out_root: Path) -> None:
    """An output dir is new, empty, or a previous eval run's (its results are replaced)."""
    if out_root.is_dir() and any(out_root.iterdir()) and not (out_root / RESULTS_FILE).exists():
        raise EvalError(f"--out {out_root} is not empty and holds no {RESULTS_FILE}: give a new directory "
                        "(an eval run replaces what a previous one wrote there)")


def run_suite(suite: Suite, out_root: Path, *, jobs: int = 1, policy: Policy = "offline",
              prices: Prices | None = None, model: str | None = None, mirror: Path | None = None,
              progress: ProgressFn | None = None, executor: str | None = None,
              llm: LLMSettings | None = None) -> list[CaseResult]:
    """Every case of ``suite``; ``results.jsonl`` grows a line as each finishes. ``executor``: None
    for threads here (``jobs`` side by side), or a Ray address (``local`` starts one). ``llm`` (or
    just ``model``): the model server and limits each case's migration uses under ``--policy llm``."""
    if llm is None and model is not None:
        llm = LLMSettings(model=model)
    check_out_dir(out_root)
    out_root.mkdir(parents=True, exist_ok=True)
    results_file = out_root / RESULTS_FILE
    results_file.write_text("", encoding="utf-8")
    prices = prices or Prices.load()
    if mirror is None and any(isinstance(c, RealCase) for c in suite.cases):
        raise EvalError("the real suite needs --mirror DIR: a directory of clones of its repositories "
                        "(see docs/evals.md)")

    def done(result: CaseResult) -> None:
        append_result(results_file, result)
        if progress is not None:
            progress(result.name, "finished", f"{result.grade} ({result.status}), {result.wall_s:.0f} s")

    if executor:
        from evals.ray_exec import run_on_ray

        def failed(name: str, reason: str) -> CaseResult:
            case = next(c for c in suite.cases if c.name == name)
            return CaseResult(**_base(case, suite.name, out_root / name, policy), status="failed_harness",  # type: ignore[arg-type]
                              grade="failed", reason=reason)

        tasks = {c.name: functools.partial(run_case, c, suite.name, out_root, policy, prices, llm, mirror)
                 for c in suite.cases}
        results = run_on_ray(executor, tasks, failed, done, jobs=jobs)
    else:
        results = _run_threads(suite, out_root, policy, prices, llm, mirror, done, progress, jobs)
    order = {c.name: i for i, c in enumerate(suite.cases)}
    return sorted(results, key=lambda r: order.get(r.name, len(order)))


def _run_threads(suite: Suite, out_root: Path, policy: Policy, prices: Prices, llm: LLMSettings | None,
                 mirror: Path | None, done: Callable[[CaseResult], None], progress: ProgressFn | None,
                 jobs: int) -> list[CaseResult]:
    results: list[CaseResult] = []
    with ThreadPoolExecutor(max_workers=max(1, jobs)) as pool:
        pending: dict[Future[CaseResult], str] = {}
        queue = list(suite.cases)
        while queue or pending:
            while queue and len(pending) < max(1, jobs):
                case = queue.pop(0)
                if progress is not None:
                    progress(case.name, "started", "")
                pending[pool.submit(run_case, case, suite.name, out_root, policy, prices, llm, mirror)] = case.name
            finished, _ = wait(list(pending), return_when=FIRST_COMPLETED, timeout=1.0)
            for fut in finished:
                pending.pop(fut)
                result = fut.result()  # run_case never raises
                results.append(result)
                done(result)
            if progress is not None:
                for name in pending.values():
                    progress(name, "step", current_step(out_root, name))
    return results


def current_step(out_root: Path, name: str) -> str:
    """What the case does now: its phase outside the migration (``set_phase``: preparing, grading), else
    the last step its migration checkpointed ('' before its first)."""
    try:
        return (out_root / slug(name) / PHASE_FILE).read_text(encoding="utf-8").strip()
    except OSError:
        pass
    sdir = out_root / slug(name) / "state"
    if not (sdir / "checkpoints.sqlite").exists():
        return ""
    try:
        from agent.migration.facade import load

        steps = load(migration_id(name), sdir).steps
    except Exception:  # not written yet, or mid-write: the display just shows no step
        return ""
    return steps[-1].node if steps else ""
