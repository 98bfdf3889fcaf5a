"""Grading a migrated case the way SWE-bench grades a patch: on a fresh copy of the original.

The migration's ``ferry.patch`` is applied to a new copy of the case's ``repo/``; only then are the
hidden grading tests copied in (as ``ferry_grading/``), and the fail-to-pass and pass-to-pass node
ids are run with pytest on tpx in the sandbox (the runner's own junit XML gives each outcome). The
migrated run command is also run once there, timed: the case's own run, the denominator of the
migration's wall-time ratio. Nothing of this is visible to the agent while it migrates.

``validate`` checks that a case means something: its fail-to-pass tests fail on tpx with the
original code and its pass-to-pass tests pass on the original (CUDA redirected to CPU).
"""

from __future__ import annotations

import logging
import shlex
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

from evals.cases import GRADING_DIRNAME, SyntheticCase
from evals.results import GradedTests, TestOutcomeName
from tools.patch import git_apply
from tools.runner.api import run
from tools.runner.launch import device_env
from tools.runner.models import RunRequest, RunResult
from tools.trace.pytest_out import JunitRefused, read_junit_xml

logger = logging.getLogger(__name__)

PYTEST = "python -m pytest -q -p no:cacheprovider -o junit_family=xunit1"


class GradingError(RuntimeError):
    """The case could not be graded (the patch does not apply, the sandbox refused the run)."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason


@dataclass
class Graded:
    tests: GradedTests
    own_run_s: float | None
    own_run_ok: bool


def _copy(case: SyntheticCase, dest: Path, patch: str | None) -> Path:
    if dest.exists():
        shutil.rmtree(dest)
    shutil.copytree(case.repo, dest, symlinks=True)
    if patch:
        try:
            git_apply(dest, patch)
        except subprocess.CalledProcessError as exc:
            raise GradingError("patch_does_not_apply",
                               f"ferry.patch does not apply to a fresh copy of {case.repo}: "
                               f"{(exc.stderr or '').strip()[:500]}") from exc
    if case.grading_dir.is_dir():
        shutil.copytree(case.grading_dir, dest / GRADING_DIRNAME, symlinks=False)
    return dest


def _outcomes(res: RunResult, nodes: list[str]) -> dict[str, TestOutcomeName]:
    """Each node id's outcome in the run's junit XML ("not_run" when pytest never reported it:
    a collection error, a crash, a test that does not exist)."""
    seen: dict[str, TestOutcomeName] = {}
    if res.junit_xml is not None:
        try:
            for t in read_junit_xml(res.junit_xml):
                seen[t.nodeid] = t.outcome
        except JunitRefused as exc:
            logger.warning("grading: the junit XML was refused: %s", exc)
    return {n: seen.get(n, "not_run") for n in nodes}


def run_tests(repo: Path, nodes: list[str], artifacts: Path, *, device: str, redirect_cuda: str | None,
              timeout_s: float, launched_by: str | None = None) -> tuple[dict[str, TestOutcomeName], RunResult]:
    """Run the node ids with pytest in the sandbox; their outcomes (and the run). ``launched_by``:
    the case's run command; tests that start the program its way (torchrun, mp.spawn) get the
    devices its processes need, as the run itself does (``tools.runner.launch``)."""
    if not nodes:
        return {}, RunResult(command=[], exit_code=0, status="ok", duration_s=0.0, stdout_tail="", stderr_tail="",
                             isolation="none")
    cmd = f"{PYTEST} " + " ".join(shlex.quote(n) for n in nodes)
    env = device_env(launched_by, repo, device=device, redirect_cuda=redirect_cuda, env={}) if launched_by else {}
    res = run(RunRequest(path=repo, command=cmd, device=device, redirect_cuda=redirect_cuda,  # type: ignore[arg-type]
                         timeout_s=timeout_s, artifacts_dir=artifacts, env=env))
    if res.status == "sandbox_error":
        raise GradingError("sandbox_error", res.error or "the sandbox could not run the grading tests")
    return _outcomes(res, nodes), res


def grade(case: SyntheticCase, patch: str, work: Path, *, timeout_s: float) -> Graded:
    """The grading tests' outcomes on tpx with ``patch`` applied, and the migrated run's own time."""
    repo = _copy(case, work / "repo", patch)
    f2p, _ = run_tests(repo, case.grading.fail_to_pass, work / "f2p", device="tpx", redirect_cuda=None,
                       timeout_s=timeout_s, launched_by=case.run)
    p2p, _ = run_tests(repo, case.grading.pass_to_pass, work / "p2p", device="tpx", redirect_cuda=None,
                       timeout_s=timeout_s, launched_by=case.run)
    own = run(RunRequest(path=repo, command=case.run, device="tpx", timeout_s=timeout_s, artifacts_dir=work / "own"))
    return Graded(tests=GradedTests(fail_to_pass=f2p, pass_to_pass=p2p),
                  own_run_s=own.duration_s if own.ok else None, own_run_ok=own.ok)


@dataclass
class Validation:
    """What a case's tests do on the ORIGINAL code."""

    f2p_on_tpx: dict[str, TestOutcomeName]  # each must not pass
    p2p_on_cpu: dict[str, TestOutcomeName]  # each must pass (CUDA redirected to CPU)

    def problems(self) -> list[str]:
        out = [f"fail-to-pass test {n} passes on the original code: it cannot fail"
               for n, o in self.f2p_on_tpx.items() if o == "passed"]
        out += [f"pass-to-pass test {n} does not pass on the original code ({o})"
                for n, o in self.p2p_on_cpu.items() if o != "passed"]
        return out


def validate(case: SyntheticCase, work: Path, *, timeout_s: float) -> Validation:
    repo = _copy(case, work / "original", None)
    f2p, _ = run_tests(repo, case.grading.fail_to_pass, work / "v-f2p", device="tpx", redirect_cuda=None,
                       timeout_s=timeout_s, launched_by=case.run)
    p2p, _ = run_tests(repo, case.grading.pass_to_pass, work / "v-p2p", device="cpu", redirect_cuda="cpu",
                       timeout_s=timeout_s, launched_by=case.run)
    return Validation(f2p_on_tpx=f2p, p2p_on_cpu=p2p)
