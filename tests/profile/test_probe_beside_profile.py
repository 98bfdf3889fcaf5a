"""The probe and the profiler share the target run: the probe's copies of what it records (module
outputs, gradients, optimizer state) are Ferry's work, never syncs the profiler blames on the user's line."""

from __future__ import annotations

from pathlib import Path

from tools.profile.profile_doc import ProfileDoc
from tools.runner.api import run
from tools.runner.models import RunRequest

TRAIN = """\
import torch
from torch import nn

dev = "cuda" if torch.cuda.is_available() else "cpu"
torch.manual_seed(0)
net = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 1)).to(dev)
opt = torch.optim.Adam(net.parameters(), lr=1e-2)
x = torch.randn(32, 8, device=dev)
y = torch.randn(32, 1, device=dev)
for step in range(4):
    opt.zero_grad()
    loss = ((net(x) - y) ** 2).mean()
    loss.backward()
    opt.step()
print("last", loss.item())  # the one sync of the program's own
"""


def _syncs(tmp_path: Path, probe: bool) -> list[tuple[str, str, int, int]]:
    repo = tmp_path / f"repo-{probe}"
    repo.mkdir()
    (repo / "train.py").write_text(TRAIN)
    res = run(RunRequest(path=repo, command="python train.py", device="tpx", redirect_cuda="tpx", probe=probe,
                         profile=True, artifacts_dir=tmp_path / f"art-{probe}", timeout_s=240))
    assert res.status == "ok", res.stderr_tail
    assert res.profile_dir is not None
    doc = ProfileDoc.model_validate_json((res.profile_dir / "profile.json").read_text())
    return sorted((s.category, s.kind, s.line, s.count) for s in doc.syncs)


def test_the_probes_copies_are_no_syncs_of_the_program(tmp_path: Path) -> None:
    probed = _syncs(tmp_path, probe=True)
    assert probed == _syncs(tmp_path, probe=False)
    # what is left is the program's own: the model's move to the device and the final .item()
    assert ("d2h_sync", "item", 15, 1) in probed
    assert not [s for s in probed if s[:2] == ("d2h_sync", "cpu")], probed
