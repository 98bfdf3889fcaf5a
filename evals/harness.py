"""The eval harness: migrate every sample repository of a suite and tabulate the statuses.

A suite is a directory whose sub-directories each hold an ``eval.json`` manifest (run command,
test command, expected status). Each case runs as its own ``ferry migrate --json`` subprocess
with a private state dir, so cases are isolated and can run in parallel; its result.json is read
back as ``agent.records.MigrationRecord``. ``ferry eval`` (``evals.eval_cmd``) plugs into the CLI
through the ``ferry.commands`` entry point: nothing in ``agent`` imports ``evals``.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, Field, ValidationError

from agent.records import MigrationRecord

DEFAULT_SUITE = Path(__file__).resolve().parent / "repos"


class SuiteError(ValueError):
    """The suite directory or one of its manifests is unusable."""


class EvalCase(BaseModel):
    name: str
    path: Path
    run: str
    test: str | None = None
    expected_status: str = "migrated"
    description: str = ""
    idiom_groups: list[str] = Field(default_factory=list)


class EvalOutcome(BaseModel):
    name: str
    expected: str
    status: str
    passed: bool
    wall_s: float
    iterations: int = 0
    runs: int = 0
    llm_calls: int = 0
    llm_tokens: int = 0
    summary: str = ""
    out_dir: str


def discover(suite: Path) -> list[EvalCase]:
    if not suite.is_dir():
        raise SuiteError(f"suite directory {suite} does not exist")
    cases = []
    for manifest in sorted(suite.glob("*/eval.json")):
        try:
            data = json.loads(manifest.read_text(encoding="utf-8"))
            data.setdefault("name", manifest.parent.name)
            cases.append(EvalCase(path=manifest.parent, **data))
        except (json.JSONDecodeError, ValidationError, TypeError) as exc:
            raise SuiteError(f"{manifest} is not a valid eval manifest: {exc}") from exc
    if not cases:
        raise SuiteError(f"{suite} holds no */eval.json manifests")
    return cases


def run_case(case: EvalCase, out_root: Path, policy: Literal["offline", "llm"], timeout_s: float) -> EvalOutcome:
    out = out_root / case.name
    out.mkdir(parents=True, exist_ok=True)
    cmd = [sys.executable, "-m", "agent.cli", "migrate", str(case.path), "--run", case.run, "--json",
           "--out", str(out), "--state-dir", str(out / "state"), "--id", f"eval-{case.name}-{int(time.time())}"]
    if case.test:
        cmd += ["--test", case.test]
    cmd += ["--llm"] if policy == "llm" else ["--offline"]
    t0 = time.monotonic()
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s)
    except subprocess.TimeoutExpired:
        return EvalOutcome(name=case.name, expected=case.expected_status, status="failed_timeout", passed=False,
                           wall_s=time.monotonic() - t0, summary=f"the migration exceeded {timeout_s:.0f}s",
                           out_dir=str(out))
    wall = time.monotonic() - t0
    (out / "migrate.stderr.txt").write_text(proc.stderr, encoding="utf-8")
    result_path = out / "result.json"
    if not result_path.exists():
        return EvalOutcome(name=case.name, expected=case.expected_status, status="failed_internal", passed=False,
                           wall_s=wall, summary=f"no result.json (exit {proc.returncode}): {proc.stderr[-500:]}",
                           out_dir=str(out))
    try:
        res = MigrationRecord.model_validate_json(result_path.read_text(encoding="utf-8"))
    except ValidationError as exc:
        return EvalOutcome(name=case.name, expected=case.expected_status, status="failed_internal", passed=False,
                           wall_s=wall, summary=f"result.json is not a migration result: {exc}", out_dir=str(out))
    return EvalOutcome(
        name=case.name, expected=case.expected_status, status=res.status, passed=res.status == case.expected_status,
        wall_s=wall, iterations=res.iterations, runs=res.runs, llm_calls=res.llm.calls, llm_tokens=res.llm.total_tokens,
        summary=res.summary or "", out_dir=str(out),
    )


def run_suite(suite: Path, out_root: Path, *, jobs: int = 1, policy: Literal["offline", "llm"] = "offline",
              timeout_s: float = 1800.0, only: list[str] | None = None) -> list[EvalOutcome]:
    cases = discover(suite)
    if only:
        unknown = set(only) - {c.name for c in cases}
        if unknown:
            raise SuiteError(f"no such case(s) in {suite}: {', '.join(sorted(unknown))}")
        cases = [c for c in cases if c.name in only]
    out_root.mkdir(parents=True, exist_ok=True)
    with ThreadPoolExecutor(max_workers=max(1, jobs)) as pool:
        outcomes = list(pool.map(lambda c: run_case(c, out_root, policy, timeout_s), cases))
    (out_root / "eval.json").write_text(json.dumps([o.model_dump() for o in outcomes], indent=2), encoding="utf-8")
    return outcomes
