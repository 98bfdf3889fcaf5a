"""A dtype the migration itself changed (float64 -> float32) is compared at the tier of the dtype the
target now computes in, and the report says so; any other dtype difference is still a failure."""

from __future__ import annotations

from pathlib import Path

import torch
import torch.nn as nn

from tests.parity.conftest import Model
from tools.parity.compare import compare_dumps
from tools.parity.models import CompareOptions
from tools.probe.child import probe_session

F64_TO_F32 = {"float64": "float32"}


def _run(out: Path, dtype: torch.dtype, *, bf16_weights: bool = False) -> Path:
    """A float64 program (the reference), or the same program migrated to ``dtype``: the same
    initial weights and the same float64 data draws, cast."""
    torch.manual_seed(0)
    model = Model().double()
    model.to(dtype)
    if bf16_weights:  # drift far beyond float32 precision
        with torch.no_grad():
            for p in model.parameters():
                p.copy_(p.to(torch.bfloat16).to(dtype))
    gen = torch.Generator().manual_seed(1)
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    with probe_session(out, steps=2):
        for step in range(2):
            x = torch.randn(64, 16, generator=gen, dtype=torch.float64).to(dtype)
            y = torch.randn(64, 4, generator=gen, dtype=torch.float64).to(dtype)
            loss = nn.functional.mse_loss(model(x), y)
            loss.backward()
            opt.step()
            opt.zero_grad()
            print(f"step {step} | loss: {loss.item():.6f}")
    return out


def test_float32_target_of_a_float64_reference_passes_at_the_float32_tier(tmp_path: Path) -> None:
    ref, tgt = _run(tmp_path / "ref", torch.float64), _run(tmp_path / "tgt", torch.float32)
    # without the record of the change: every tensor is a dtype mismatch (what the issue saw)
    plain = compare_dumps(ref, tgt)
    assert plain.verdict == "fail" and plain.first_divergence is not None
    assert plain.first_divergence.likely_cause == "dtype" and plain.dtype_changes_compared == {}

    report = compare_dumps(ref, tgt, CompareOptions(dtype_changes=F64_TO_F32))
    assert report.verdict == "pass", report.summary
    changed = [t for t in report.tensors if t.ref_dtype == "float64"]
    assert changed and all(t.target_dtype == "float32" and t.verdict == "pass" for t in changed)
    assert all(t.tolerances is not None and t.tolerances.dtype == "float32" for t in changed)
    assert all(t.reason.startswith("compared at the float32 tier (the migration changed float64 -> float32)")
               for t in changed)
    assert report.dtype_changes_compared == {"float64 -> float32": len(changed)}
    assert "float64 -> float32 by the migration: compared at the float32 tier" in report.summary
    assert any("the migration changed float64 -> float32" in n for n in report.notes)


def test_a_recorded_dtype_change_still_fails_real_drift(tmp_path: Path) -> None:
    ref, tgt = _run(tmp_path / "ref", torch.float64), _run(tmp_path / "tgt", torch.float32, bf16_weights=True)
    report = compare_dumps(ref, tgt, CompareOptions(dtype_changes=F64_TO_F32))
    assert report.verdict == "fail"
    div = report.first_divergence
    assert div is not None and div.output is not None and div.output.tier != "dtype"


def test_a_dtype_change_the_migration_did_not_make_is_a_mismatch(tmp_path: Path) -> None:
    ref, tgt = _run(tmp_path / "ref", torch.float64), _run(tmp_path / "tgt", torch.bfloat16)
    report = compare_dumps(ref, tgt, CompareOptions(dtype_changes=F64_TO_F32))
    outputs = [t for t in report.tensors if t.kind == "module_output"]
    assert outputs and all((t.verdict, t.tier) == ("fail", "dtype") for t in outputs)
    assert report.dtype_changes_compared == {}
