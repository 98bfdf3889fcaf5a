"""What of Ferry's own tree a sandboxed run sees: only the packages its runtime imports
(``sandbox.isolation.CHILD_PACKAGES``), never ``ferry-out/`` of an earlier run, ``.git`` or the
rest of the checkout; a tpx run with the CUDA redirect still finds everything it needs."""

from __future__ import annotations

import shutil
import uuid
from pathlib import Path

import pytest

from sandbox import detect
from sandbox.isolation import CHILD_PACKAGES, ferry_root
from tools.runner.api import run
from tools.runner.models import RunRequest

pytestmark = pytest.mark.skipif("bwrap" not in detect().available, reason="bubblewrap cannot run here")

PROBE = """\
import os, sys
root = sys.argv[1]
for rel in sys.argv[2:]:
    path = os.path.join(root, rel)
    try:
        with open(path) as fh:
            print("READ", rel, fh.read().strip())
    except OSError as exc:
        print("DENIED", rel, type(exc).__name__)
try:
    print("LIST", sorted(os.listdir(root)))
except OSError as exc:
    print("LIST", type(exc).__name__)
import torch
x = torch.ones(3, device="cuda") * 2
print("DEVICE", x.device.type, x.sum().item())
"""


@pytest.fixture
def planted():
    """A secret in ``<ferry tree>/ferry-out/`` (what ``ferry run ... --out ferry-out`` leaves there)."""
    out = ferry_root() / "ferry-out"
    existed = out.exists()
    name = f"secret-{uuid.uuid4().hex}.txt"
    out.mkdir(exist_ok=True)
    (out / name).write_text("TOP-SECRET-RESULT\n")
    (out / name).chmod(0o644)
    yield f"ferry-out/{name}"
    if existed:
        (out / name).unlink()
    else:
        shutil.rmtree(out)


def test_the_sandbox_sees_only_the_child_packages_of_the_ferry_tree(tmp_path: Path, planted: str):
    repo = tmp_path / "repo"
    repo.mkdir()
    (repo / "probe.py").write_text(PROBE)
    targets = [planted, "pyproject.toml", "README.md"]
    if (ferry_root() / ".git").exists():
        targets.append(".git" if (ferry_root() / ".git").is_file() else ".git/HEAD")
    res = run(RunRequest(path=repo, command=["python", "probe.py", str(ferry_root()), *targets], device="tpx",
                         redirect_cuda="tpx", isolation="bwrap", artifacts_dir=tmp_path / "art", timeout_s=300))
    assert res.status == "ok", res.stderr_tail
    out = res.stdout_tail
    assert "TOP-SECRET-RESULT" not in out
    for rel in targets:
        assert f"DENIED {rel} FileNotFoundError" in out, out
    listed = next(line for line in out.splitlines() if line.startswith("LIST"))
    allowed = set(CHILD_PACKAGES) | {".venv"}  # the venv, when it lives in the checkout, is bound itself
    shown = set(eval(listed.split(" ", 1)[1]))
    assert shown <= allowed and {"backend", "tools"} <= shown, listed
    assert "DEVICE tpx 6.0" in out, out
    assert (res.seccomp or "").startswith("on"), res.seccomp
