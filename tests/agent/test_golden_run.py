"""The parity node's fp32 golden run: under a CUDA autocast, a parity failure is judged again by
NUMERICS.md's error ratio against the original run on CPU with autocast off; the node runs it (real
sandboxed runs), keeps it in the state, and names the ratio. A wrong computation still fails."""

from __future__ import annotations

from pathlib import Path

import pytest
from langgraph.runtime import Runtime

from agent.migration import adapters
from agent.migration.graph import MigrationContext
from agent.migration.nodes.parity import parity
from agent.migration.render import parity_section
from agent.migration.runs import RunScheduler
from agent.migration.state import MigrationOptions, dump, golden_of, parity_of
from tools.runner.models import RunResult

# A CUDA program trained under bf16 autocast. On any device but the CPU its Linear computes as a
# matmul then the bias (two bf16 roundings where addmm has one), as another device's kernel may:
# the target differs from the reference by rounding only. WRONG: the device path uses ReLU for GELU.
PROGRAM = '''import torch
import torch.nn as nn

WRONG = {wrong}


class Proj(nn.Linear):
    def forward(self, x):
        if x.device.type != "cpu":
            out = x @ self.weight.t()
            return out + self.bias.to(out.dtype)
        return super().forward(x)


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.qkv, self.proj, self.head = Proj(64, 192), Proj(64, 64), Proj(64, 8)
        self.norm = nn.LayerNorm(64)

    def forward(self, x):
        q, k, v = self.qkv(x).chunk(3, dim=-1)
        att = torch.softmax(q @ k.transpose(-1, -2) / 8.0, dim=-1)
        h = self.norm(x + self.proj(att @ v))
        act = torch.relu if WRONG and h.device.type != "cpu" else nn.functional.gelu
        return self.head(act(h))


torch.manual_seed(0)
model = Net().cuda()
opt = torch.optim.SGD(model.parameters(), lr=0.1)
gen = torch.Generator().manual_seed(1)
for step in range(2):
    x = (torch.randn(4, 16, 64, generator=gen) * 3).cuda()
    y = torch.randn(4, 16, 8, generator=gen).cuda()
    with torch.autocast("cuda", dtype=torch.bfloat16):
        pred = model(x)
    loss = nn.functional.mse_loss(pred.float(), y)
    loss.backward()
    opt.step()
    opt.zero_grad()
    print(f"step {{step}} | loss: {{loss.item():.6f}}")
'''


def _run(repo: Path, adir: Path, device: str) -> RunResult:
    env = {"TPX_MATMUL_PRECISION": "highest"} if device == "tpx" else {}
    run = adapters.run(repo, "python prog.py", device=device, redirect_cuda=device, probe=True, profile=False,
                      timeout_s=180, seed=0, artifacts_dir=adir, env=env)
    assert run.ok, run.stderr_tail[-2000:]
    return run


def _state(tmp_path: Path, wrong: bool) -> dict:
    repo = tmp_path / ("wrong" if wrong else "right") / "repo"
    repo.mkdir(parents=True)
    (repo / "prog.py").write_text(PROGRAM.format(wrong=wrong))
    opts = MigrationOptions(source=str(repo), run_command="python prog.py", state_dir=str(tmp_path / "state"),
                            run_timeout_s=180)
    ref = _run(repo, repo.parent / "reference", "cpu")
    tgt = _run(repo, repo.parent / "target", "tpx")
    return {"migration_id": f"golden-{'wrong' if wrong else 'right'}", "options": opts.model_dump(mode="json"),
            "reference": dump(ref), "target_ok": dump(tgt), "last_run": dump(tgt), "runs": [], "edits": [],
            "steps": [], "iteration": 0}


def _parity(state: dict) -> dict:
    return parity(state, Runtime(context=MigrationContext(runs=RunScheduler())))


@pytest.fixture(scope="module")
def root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("golden")


def test_a_rounding_only_difference_under_autocast_passes_by_the_error_ratio(root: Path) -> None:
    state = _state(root, wrong=False)
    plain = adapters.compare(Path(state["reference"]["probe_dir"]), Path(state["target_ok"]["probe_dir"]))
    assert plain.failed, plain.summary  # the tiers alone call bf16 rounding a failure

    update = _parity(state)
    merged = {**state, **update}
    report = parity_of(merged)
    assert report is not None and report.passed, report.summary if report else update
    golden = golden_of(merged)
    assert golden is not None and golden.ok and golden.probe_dir is not None
    assert [r["kind"] for r in update["runs"]] == ["golden"]
    assert report.golden is not None and report.golden.decided > 0 and report.golden.decided_fail == 0
    assert report.golden_dir == str(golden.probe_dir)
    summary = update["steps"][0]["summary"]
    assert summary.startswith("parity passes") and "judged by the error ratio" in summary, summary
    assert "status" not in update
    section = "\n".join(parity_section(report))  # report.md's Parity section names it too
    assert "Error ratio: fp32 golden run (autocast off)" in section and "judged by the error ratio" in section


def test_a_wrong_computation_under_autocast_still_fails_with_the_golden_run(root: Path) -> None:
    state = _state(root, wrong=True)
    update = _parity(state)
    report = parity_of({**state, **update})
    assert report is not None and report.failed, update
    assert report.golden is not None and report.golden.decided_fail > 0
    assert update.get("status") == "partial" and "parity fails" in update["summary"], update
    assert "judged by the error ratio" in update["summary"]
    div = report.first_divergence
    assert div is not None and div.module == "Net", report.summary
