"""Parity of a program without an nn.Module: a float64 heat-equation solver's printed error, the
field it saves and its top-level tensor are compared (issue 26: it used to be "nothing to compare")."""

from __future__ import annotations

import sys
import types
from pathlib import Path

import pytest

from tests.parity.heat_solver import solver
from tools.parity.compare import compare_dumps
from tools.parity.models import CompareOptions
from tools.probe.child import probe_session


def run_pde(out: Path, tmp: Path, monkeypatch: pytest.MonkeyPatch, *, alpha: float = 0.1, dtype: str = "float64",
            device: str = "cuda:0") -> Path:
    """Run the solver under an in-process probe, in its own working directory (as each sandboxed
    run has its own path) with its own ``__main__``; returns the dump."""
    work = tmp / f"work-{out.name}"
    work.mkdir()
    main = types.ModuleType("__main__")
    with monkeypatch.context() as m:
        m.chdir(work)
        m.delenv("FERRY_WORKSPACE", raising=False)
        m.setitem(sys.modules, "__main__", main)
        with probe_session(out, steps=2):
            exec(compile(solver(alpha=alpha, dtype=dtype, shown_device=device), str(work / "pde.py"), "exec"),
                 main.__dict__)
    return out


@pytest.fixture
def reference(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    return run_pde(tmp_path / "ref", tmp_path, monkeypatch)


def test_identical_runs_compare_the_metric_the_saved_field_and_the_final_tensor(
        reference: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    target = run_pde(tmp_path / "tgt", tmp_path, monkeypatch, device="tpx:0")  # device=... differs by design
    report = compare_dumps(reference, target)
    assert report.verdict == "pass" and report.compared, report.summary
    keys = {t.key: t for t in report.rows()}
    assert {"scalar:max_err", "saved:u_final.pt:obj['u']#0", "final:u"} <= set(keys)
    assert keys["scalar:max_err"].ref_shape == [12]  # every printed step
    assert not any(k.startswith("scalar:") and k != "scalar:max_err" for k in keys), keys  # not t, dtype, device
    assert keys["final:u"].verdict == "pass" and keys["final:u"].kind == "final"
    assert not any("nothing to compare" in n for n in report.notes)


def test_a_wrong_coefficient_fails_naming_the_saved_field(reference: Path, tmp_path: Path,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    target = run_pde(tmp_path / "tgt", tmp_path, monkeypatch, alpha=0.12, device="tpx:0")
    report = compare_dumps(reference, target)
    assert report.verdict == "fail"
    failing = {t.key for t in report.rows() if t.verdict == "fail"}
    assert {"scalar:max_err", "saved:u_final.pt:obj['u']#0", "final:u"} <= failing
    div = report.first_divergence
    assert div is not None and div.key == "saved:u_final.pt:obj['u']#0"  # the first failing result, in run order
    assert "a tensor the program saved" in div.explanation
    assert "saved:u_final.pt" in report.summary


def test_a_float64_program_migrated_to_float32_compares_at_the_float32_tier(
        reference: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    target = run_pde(tmp_path / "tgt", tmp_path, monkeypatch, dtype="float32", device="tpx:0")
    # a float64 result is float32 on a device without float64, whoever changed it (a reviewer's edit too):
    # without the migration's word the saved and final tensors are compared at the float32 tier all the same
    plain = compare_dumps(reference, target)
    assert all(t.verdict == "pass" and "float32 tier" in t.reason for t in plain.tensors
               if t.kind in ("saved", "final")), plain.summary
    report = compare_dumps(reference, target, CompareOptions(dtype_changes={"float64": "float32"}))
    final = next(t for t in report.rows() if t.key == "final:u")
    assert final.verdict == "pass" and "float32 tier" in final.reason
    assert report.dtype_changes_compared["float64 -> float32"] >= 2  # the saved field and the final u


def test_a_run_with_only_non_metric_fields_has_nothing_to_compare(tmp_path: Path) -> None:
    """Device and dtype fields and timings are never compared: a program printing only those (and
    saving nothing, no top-level tensor) still has nothing to compare."""
    for name, device in (("ref", "cuda:0"), ("tgt", "tpx:0")):
        with probe_session(tmp_path / name, steps=2, record_final=False):
            print(f"t=0.0100 dtype=torch.float64 device={device} step_time=0.{len(name)}s mem 12MB")
    report = compare_dumps(tmp_path / "ref", tmp_path / "tgt")
    assert not report.compared and report.counts["compared"] == 0


def test_a_program_with_module_calls_is_judged_by_them_not_by_its_saved_end_state(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A training's checkpoint and final tensors drift (or hold sampled tokens): where the program runs
    modules, those are the evidence, and what it saved is listed as not compared."""
    import torch

    def run(out: Path, shift: float) -> Path:
        work = tmp_path / f"work-{out.name}"
        work.mkdir()
        with monkeypatch.context() as m:
            m.chdir(work)
            m.delenv("FERRY_WORKSPACE", raising=False)
            with probe_session(out, steps=1):
                torch.manual_seed(0)
                model = torch.nn.Linear(4, 2)
                torch.save({"w": model.weight + shift}, "init.pt")  # before any module ran: recorded
                model(torch.ones(3, 4))
                torch.save({"w": model.weight + shift}, "ckpt.pt")  # the end state: neither recorded nor copied
        return out

    ref = run(tmp_path / "ref", 0.0)
    from tools.probe.dump import ProbeDump

    assert sorted(k for k in ProbeDump(ref).tensor_events if k.startswith("saved:")) == ["saved:init.pt:obj['w']#0"]
    report = compare_dumps(ref, run(tmp_path / "tgt", 0.5))
    assert report.verdict == "pass", report.summary
    assert not any(t.kind == "saved" for t in report.tensors)
    assert any("saved and its final top-level tensors were recorded but not compared" in n for n in report.notes)
