"""Parity under autocast: the reference (bf16 autocast with CUDA's cast policy) and a target whose
kernels round differently (a linear layer as a matmul then an add, two bf16 roundings where addmm
has one, as another device's kernels may) each carry their own rounding error; the fp32 golden run
(autocast off) tells by NUMERICS.md's error ratio whether the target is as close to fp32 as the
reference. A real computation bug still fails with the golden run."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
import torch.nn as nn

from tools.parity.compare import compare_dumps
from tools.parity.models import CompareOptions
from tools.probe.child import probe_session
from tools.redirect import amp_policy


class Proj(nn.Linear):
    """nn.Linear, or (``split``) the same product computed by another kernel: matmul, then the bias."""

    split = False

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.split:
            out = x @ self.weight.t()
            return out + self.bias.to(out.dtype)
        return super().forward(x)


class Attention(nn.Module):
    def __init__(self, width: int = 64, act: str = "gelu", split: bool = False) -> None:
        super().__init__()
        self.qkv, self.proj = Proj(width, 3 * width), Proj(width, width)
        self.qkv.split = self.proj.split = split
        self.norm = nn.LayerNorm(width)
        self.act = nn.GELU() if act == "gelu" else nn.ReLU()
        self.head = nn.Linear(width, 8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        q, k, v = self.qkv(x).chunk(3, dim=-1)
        att = torch.softmax(q @ k.transpose(-1, -2) / 8.0, dim=-1)
        h = self.norm(x + self.proj(att @ v))
        return self.head(self.act(h))


def _run(out: Path, autocast: bool, act: str = "gelu", split: bool = False) -> Path:
    """Two training steps of the same model and data, probed; under bf16 autocast (CUDA's policy, as
    the redirect applies it to the reference) or in fp32."""
    torch.manual_seed(0)
    model = Attention(act=act, split=split)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    gen = torch.Generator().manual_seed(1)
    with probe_session(out, steps=2):
        for step in range(2):
            x = torch.randn(4, 16, 64, generator=gen) * 3
            y = torch.randn(4, 16, 8, generator=gen)
            with torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast):
                amp_policy.enter_region()
                try:
                    pred = model(x)
                finally:
                    amp_policy.exit_region()
            loss = nn.functional.mse_loss(pred.float(), y)
            loss.backward()
            opt.step()
            opt.zero_grad()
            print(f"step {step} | loss: {loss.item():.6f}")
    return out


@pytest.fixture(scope="module")
def dumps(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    amp_policy.install()
    root = tmp_path_factory.mktemp("autocast")
    return {"ref": _run(root / "ref", True), "golden": _run(root / "golden", False),
            "tgt": _run(root / "tgt", True, split=True), "wrong": _run(root / "wrong", True, act="relu", split=True)}


def test_bf16_autocast_target_fails_the_tiers_alone_and_passes_by_the_error_ratio(dumps: dict[str, Path]) -> None:
    plain = compare_dumps(dumps["ref"], dumps["tgt"])
    assert plain.verdict == "fail", plain.summary  # one-ulp bf16 differences on near-zero elements
    assert plain.golden is None
    assert not any(t.tier == "dtype" for t in plain.tensors)  # same cast policy on both sides

    report = compare_dumps(dumps["ref"], dumps["tgt"], CompareOptions(golden_dir=dumps["golden"]))
    assert report.passed, report.summary
    decided = [t for t in report.rows() if t.tier == "error_ratio"]
    assert decided and all(t.verdict in ("pass", "warn") for t in decided)
    assert all(t.metrics is not None and t.metrics.error_ratio is not None and t.metrics.error_ratio <= 2
               for t in decided)
    assert report.golden is not None and report.golden.decided == len(decided) and report.golden.decided_fail == 0
    assert report.golden.max_ratio == max(t.metrics.error_ratio for t in decided if t.metrics)
    assert "judged by the error ratio ||target-golden||/||reference-golden||" in report.summary
    assert any("fp32 golden run (autocast off)" in n for n in report.notes)


def test_a_wrong_computation_fails_even_with_the_golden_run(dumps: dict[str, Path]) -> None:
    """ReLU where the program has GELU: the target is much farther from fp32 than the reference."""
    report = compare_dumps(dumps["ref"], dumps["wrong"], CompareOptions(golden_dir=dumps["golden"]))
    assert report.verdict == "fail", report.summary
    div = report.first_divergence
    assert div is not None and div.module == "Attention.act" and div.step == 0, report.summary
    # neither the tiered check nor the error ratio lets it through
    assert div.output.verdict == "fail" and div.output.metrics is not None
    assert div.output.metrics.error_ratio is not None and div.output.metrics.error_ratio > 2
