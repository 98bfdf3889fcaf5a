"""Grading of a real case from its migration record: resolved only when the migrated run passes
on tpx, did the program's work there (its compute ops) and parity passes; otherwise the reason names
what failed, including an original that does not run on CPU, and carries the migration's own summary
(the failure's signature and line)."""

from __future__ import annotations

import pytest

from agent.migration.records import CpuCheck, MigrationRecord
from evals.cases import RealCase, load_real
from evals.harness import grade_control, grade_real
from tools.patch import FileChange


def _run(kind: str, status: str, exit_code: int, duration_s: float = 2.0) -> dict[str, object]:
    return {"kind": kind, "command": ["/bin/sh", "-c", "python train.py"], "status": status,
            "exit_code": exit_code, "duration_s": duration_s, "isolation": "bwrap"}


ON_TPX = {"tpx_ops": 90, "total_ops": 100, "tpx_share": 0.9, "compute_tpx_ops": 12, "compute_ops": 12,
          "compute_share": 1.0}


def _record(status: str, runs: list[dict[str, object]], parity: dict[str, object] | None = None,
            summary: str | None = None, work: dict[str, object] | None = ON_TPX) -> MigrationRecord:
    return MigrationRecord.model_validate({"migration_id": "eval-x", "status": status, "source": "/r",
                                           "run_command": "python train.py", "run_log": runs,
                                           "parity": parity or {}, "summary": summary, "device_work": work})


def test_a_passing_run_with_passing_parity_is_resolved() -> None:
    rec = _record("migrated", [_run("reference", "ok", 0), _run("target", "ok", 0, 4.5)],
                  {"verdict": "pass", "passed": True})
    assert grade_real(rec) == ("resolved", "", 4.5)


def test_an_original_that_fails_on_cpu_is_named_with_the_migrations_summary() -> None:
    summary = ("the original code does not run with CUDA redirected to CPU (other at train.py:128: RuntimeError "
               "Cannot access accelerator device when none is available.)")
    rec = _record("needs_human", [_run("target", "failed", 1), _run("reference", "failed", 1)], summary=summary)
    grade, reason, own = grade_real(rec)
    assert (grade, own) == ("failed", None)
    assert reason.startswith("needs_human: the migrated run does not pass on tpx (failed); "
                             "the original does not run on CPU with CUDA redirected (failed); parity not checked")
    assert reason.endswith(summary)


def test_a_parity_failure_names_its_first_divergence() -> None:
    rec = _record("partial", [_run("reference", "ok", 0), _run("target", "ok", 0, 3.0)],
                  {"verdict": "fail", "passed": False, "first_divergence": "RNNLM.lstm#0"},
                  summary="the migrated code runs on tpx but parity fails")
    grade, reason, own = grade_real(rec)
    assert (grade, own) == ("partial", 3.0)
    assert reason == ("partial: parity fail (first divergence RNNLM.lstm#0) -- the migrated code runs on tpx but "
                      "parity fails")


def test_a_passing_run_whose_work_stayed_on_cpu_is_partial() -> None:
    """The run passes and matches, but it matched because nothing moved: a CPU program stays a CPU program."""
    runs = [_run("reference", "ok", 0), _run("target", "ok", 0, 2.5)]
    on_cpu = {"tpx_ops": 0, "total_ops": 146, "tpx_share": 0.0, "compute_tpx_ops": 0, "compute_ops": 13,
              "compute_share": 0.0}
    grade, reason, own = grade_real(_record("partial", runs, {"verdict": "pass", "passed": True}, work=on_cpu))
    assert (grade, own) == ("partial", 2.5)
    assert reason.startswith("partial: the target run executed 0 of 146 ops on tpx: the work stayed on CPU")
    grade, reason, _ = grade_real(_record("partial", runs, {"verdict": "pass", "passed": True}, work=None))
    assert grade == "partial" and "no evidence that the target run executed its work on tpx" in reason


# --- controls: a program without CUDA, which Ferry must leave alone and working ------------------

def _control(status: str = "partial", patched: tuple[str, ...] = ("dcgan/main.py",), parity: bool = True,
             cpu: str = "pass", entry: str | None = "regression/main.py") -> MigrationRecord:
    rec = _record(status, [_run("reference", "ok", 0), _run("target", "ok", 0, 1.5)],
                  {"verdict": "pass" if parity else "fail", "passed": parity},
                  summary="runs on tpx, tests pass and parity passes, but the work stayed on CPU",
                  work={"tpx_ops": 0, "total_ops": 146, "tpx_share": 0.0})
    return rec.model_copy(update={
        "entry_file": entry,
        "patch_files": [FileChange(path=p, change="modified", added_lines=1, removed_lines=1) for p in patched],
        "cpu_check": CpuCheck(verdict=cpu, passed=cpu == "pass", reason=f"cpu {cpu}", run_status="ok",
                              against="reference")})


def test_a_control_left_alone_and_working_is_resolved() -> None:
    assert grade_control(_control()) == ("resolved", "", 1.5)
    # a program at the repository's root: only root-level files are its own
    assert grade_control(_control(entry="main.py", patched=("pkg/cuda_part.py",)))[0] == "resolved"


@pytest.mark.parametrize("kw, why", [
    ({"patched": ("dcgan/main.py", "regression/main.py")},
     "the patch changes the control's own code (regression/main.py)"),
    ({"entry": "main.py", "patched": ("setup.py",)}, "the patch changes the control's own code (setup.py)"),
    ({"status": "migrated"}, "the verdict claims `migrated`"),
    ({"parity": False}, "parity fail"),
    ({"cpu": "fail"}, "the CPU check did not pass (fail): cpu fail"),
    ({"cpu": "not_applicable"}, "the CPU check did not pass (not_applicable)"),
    ({"status": "failed_internal"}, "the migration ended failed_internal, not partial"),
    ({"entry": None}, "entry file was not found"),
])
def test_a_control_that_was_changed_broken_or_overclaimed_is_not_resolved(kw: dict[str, object], why: str) -> None:
    grade, reason, _ = grade_control(_control(**kw))  # type: ignore[arg-type]
    assert grade == "partial" and why in reason, reason


def test_the_real_manifest_marks_its_control() -> None:
    cases = {c.name: c for c in load_real().cases if isinstance(c, RealCase)}
    assert cases["examples-regression"].control is True
    assert [n for n, c in cases.items() if c.control] == ["examples-regression"]
