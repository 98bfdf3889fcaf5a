"""A test's float32 tolerance check that fails on tpx by bf16 matmul rounding gets full fp32 matmuls on
the target device in that test module (test_tolerance_matmul_precision, FIX008); other failures do not."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from agent.policy import Proposal, propose
from agent.policy.base import Diagnosis, FixContext, UserFrame

ROOT = Path(__file__).resolve().parents[2]

# what capability_branches' test compares: two float32 paths of one computation at rtol=1e-4
TEST_MODULE = '''import torch


def test_two_matmul_orders_agree():
    g = torch.Generator().manual_seed(0)
    a, b, c = (torch.randn(32, 32, generator=g) for _ in range(3))
    device = torch.accelerator.current_accelerator() or torch.device("cpu")
    a, b, c = a.to(device), b.to(device), c.to(device)
    torch.testing.assert_close((a @ b) @ c, a @ (b @ c), rtol=1e-4, atol=1e-4)
'''

NOT_CLOSE = ("Tensor-likes are not close!\n\nMismatched elements: 14 / 16 (87.5%)\n"
             "Greatest absolute difference: {abs} at index (1, 0) (up to 1e-05 allowed)\n"
             "Greatest relative difference: {rel} at index (3, 1) (up to 0.0001 allowed)")


def _diag(rel: str = "0.0038792660925537348", phase: str = "test", exc_type: str = "AssertionError",
          absolute: str = "0.00043") -> Diagnosis:
    return Diagnosis(phase=phase, kind="other", exc_type=exc_type, message=NOT_CLOSE.format(rel=rel, abs=absolute),
                     frames=[UserFrame(file="tests/test_m.py", line=9, function="test_two_matmul_orders_agree")])


def _ctx(tmp_path: Path, **kw: object) -> FixContext:
    (tmp_path / "tests").mkdir(exist_ok=True)
    (tmp_path / "tests" / "test_m.py").write_text(TEST_MODULE)
    (tmp_path / "train.py").write_text("import torch\n")
    return FixContext(source=tmp_path, known_files=["tests/test_m.py", "train.py"], entry_file="train.py", **kw)


def test_a_bf16_sized_mismatch_gets_full_fp32_matmuls_in_the_test_module(tmp_path):
    p = propose(_diag(), _ctx(tmp_path))
    assert isinstance(p, Proposal) and p.rule == "test_tolerance_matmul_precision" and p.kind == "policy"
    # the test module, not the entry script: the test never imports it
    assert list(p.files) == ["tests/test_m.py"] and p.site == "tests/test_m.py:1"
    lines = p.files["tests/test_m.py"].splitlines()
    assert lines[0] == "import torch"
    assert lines[1].startswith("if torch.accelerator.is_available()") and '.type == "tpx"' in lines[1]
    assert lines[2].strip().startswith('torch.set_float32_matmul_precision("highest")')


def test_the_fix_is_not_proposed_twice(tmp_path):
    ctx = _ctx(tmp_path)
    p = propose(_diag(), ctx)
    assert isinstance(p, Proposal)
    (tmp_path / "tests" / "test_m.py").write_text(p.files["tests/test_m.py"])
    assert propose(_diag(), ctx) is None  # already there: nothing more the policy can do
    assert propose(_diag(), _ctx(tmp_path, tried=[p.key])) is None


def test_a_large_relative_difference_at_a_near_zero_element_is_still_rounding(tmp_path):
    """apex_flash_attn's attention test: relative 0.18 at an element near zero, absolute 0.0036 (under a bf16 ulp
    at magnitude 1)."""
    p = propose(_diag(rel="0.18423232436180115", absolute="0.0035622119903564453"), _ctx(tmp_path))
    assert isinstance(p, Proposal) and p.rule == "test_tolerance_matmul_precision"


@pytest.mark.parametrize("diag", [
    _diag(rel="0.8", absolute="0.5"),  # a different result, not rounding
    _diag(rel="inf", absolute="inf"),
    _diag(phase="run"),  # the program's own run: parity judges it, not this rule
    _diag(exc_type="ValueError"),
    Diagnosis(phase="test", kind="other", exc_type="AssertionError", message="assert 0.7 > 0.8",
              frames=[UserFrame(file="tests/test_m.py", line=9)]),
], ids=["large", "inf", "run-phase", "not-an-assertion", "plain-assert"])
def test_other_failures_get_no_precision_fix(tmp_path, diag):
    assert propose(diag, _ctx(tmp_path)) is None


def _pytest(path: Path) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TORCH_DEVICE_BACKEND_AUTOLOAD", "TPX_"))}
    env.update({"TORCH_DEVICE_BACKEND_AUTOLOAD": "1", "PYTHONPATH": str(ROOT), "CUDA_VISIBLE_DEVICES": ""})
    return subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(path)],
                          capture_output=True, text=True, timeout=180, env=env, cwd=path.parent)


def test_the_patched_test_passes_on_tpx_where_the_original_failed(tmp_path):
    ctx = _ctx(tmp_path)
    original = tmp_path / "tests" / "test_m.py"
    before = _pytest(original)
    assert before.returncode == 1 and "Tensor-likes are not close!" in before.stdout, before.stdout[-1500:]
    p = propose(_diag(), ctx)
    assert isinstance(p, Proposal)
    original.write_text(p.files["tests/test_m.py"])
    after = _pytest(original)
    assert after.returncode == 0, after.stdout[-1500:]
