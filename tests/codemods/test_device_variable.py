"""The device variable: reuse, naming, shadowing, torch aliases; rules that must not fire."""

from __future__ import annotations

from pathlib import Path

from tools.codemods.engine import analyze
from tools.codemods.registry import all_rules

ACCEL = 'torch.accelerator.current_accelerator(check_available=True) or torch.device("cpu")'


def test_inserted_after_imports_once():
    out = analyze('"""Doc."""\nimport torch\n\nx = torch.ones(1).cuda()\ny = torch.ones(1).cuda()\n').new_source
    assert out == (f'"""Doc."""\nimport torch\n\ndevice = {ACCEL}\n\n'
                   'x = torch.ones(1).to(device)\ny = torch.ones(1).to(device)\n')


def test_name_falls_back_when_device_is_taken():
    src = "import torch\n\ndef device():\n    return 1\n\nx = torch.ones(1).cuda()\n"
    out = analyze(src).new_source
    assert f"ferry_device = {ACCEL}" in out and "x = torch.ones(1).to(ferry_device)" in out


def test_local_assignment_to_the_same_name_gets_the_expression():
    src = 'import torch\n\ndef main():\n    device = torch.device("cuda")\n    return torch.ones(1).to(device)\n'
    out = analyze(src).new_source
    assert f"    device = {ACCEL}\n" in out
    assert "device = device" not in out


def test_torch_alias_is_used_for_generated_code():
    out = analyze("import torch as T\nx = T.ones(1).cuda()\n").new_source
    assert out == "import torch as T\n\ndevice = T.accelerator.current_accelerator(check_available=True) or " \
                  'T.device("cpu")\nx = T.ones(1).to(device)\n'


def test_tpx_mode_reuses_an_accelerator_definition_without_change():
    src = f"import torch\ndevice = {ACCEL}\nx = torch.ones(1).to(device)\n"
    assert analyze(src, device_mode="tpx").new_source == src


def test_non_cuda_code_is_not_reported():
    src = Path(__file__).read_text(encoding="utf-8").split("# --- sample ---")[-1]
    assert analyze(src).findings == []


def test_every_rule_documents_itself():
    docs = (Path(__file__).resolve().parents[2] / "docs" / "codemods.md").read_text(encoding="utf-8")
    fixtures = Path(__file__).parent / "fixtures"
    for rule in all_rules():
        assert rule.ID.startswith("FRY") and rule.NAME and rule.DESCRIPTION
        assert rule.CATEGORY in ("auto", "review", "unsupported")
        assert f"**{rule.ID}**" in docs
        for case in fixtures.glob(f"{rule.ID}/*.in.py"):
            assert case.name[: -len(".in.py")] in docs


# --- sample ---
import math  # noqa: E402


def cosine(step, total, cuda_like=None):
    """Mentions cuda in a docstring, to=2, .to in text; none of it is CUDA code."""
    values = [x.to(dtype=float) for x in []]
    return 0.5 * (1 + math.cos(math.pi * step / total)), values
