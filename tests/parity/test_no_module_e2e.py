"""End to end through the runner: a float64 CUDA solver without an nn.Module, on the CPU (reference)
and migrated to float32 on tpx (target); parity compares its printed error, saved field and final tensor."""

from __future__ import annotations

from pathlib import Path

from tests.parity.heat_solver import solver
from tools.parity.compare import compare_dumps
from tools.parity.models import CompareOptions
from tools.runner.api import run
from tools.runner.models import RunRequest


def _repo(root: Path, dtype: str, alpha: float = 0.1) -> Path:
    root.mkdir()
    (root / "solver.py").write_text(solver(dtype=dtype, alpha=alpha, steps=10, device='torch.device("cuda")',
                                                  save='os.makedirs("out", exist_ok=True)\ntorch.save(u, "out/u.pt")'))
    return root


def test_float64_solver_on_cpu_vs_float32_on_tpx(tmp_path: Path) -> None:
    ref = run(RunRequest(path=_repo(tmp_path / "orig", "float64"), command=["python", "solver.py"], device="cpu",
                         redirect_cuda="cpu", probe=True, artifacts_dir=tmp_path / "ref"))
    tgt = run(RunRequest(path=_repo(tmp_path / "migrated", "float32"), command=["python", "solver.py"], device="tpx",
                         redirect_cuda="tpx", probe=True, artifacts_dir=tmp_path / "tgt"))
    assert ref.status == "ok" and tgt.status == "ok", (ref.stderr_tail, tgt.stderr_tail)
    assert "device=tpx:0" in (tgt.stdout_tail or "") and "dtype=torch.float32" in (tgt.stdout_tail or "")
    assert ref.probe_dir is not None and tgt.probe_dir is not None
    report = compare_dumps(ref.probe_dir, tgt.probe_dir, CompareOptions(dtype_changes={"float64": "float32"}))
    rows = {t.key: t for t in report.rows()}
    assert report.verdict in ("pass", "warn") and report.compared, report.summary
    # the printed error (not t, dtype or device), the saved field and the top-level tensor were compared
    assert [k for k in rows if k.startswith("scalar:")] == ["scalar:max_err"]
    assert rows["scalar:max_err"].ref_shape == [10]
    assert rows["saved:out/u.pt:obj#0"].verdict == "pass" and rows["final:u"].verdict == "pass"
    assert rows["final:u"].ref_dtype == "float64" and rows["final:u"].target_dtype == "float32"
