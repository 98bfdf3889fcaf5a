"""What Ferry loads into the user's process (issue 33 items 2 and 3): the standard library and torch only,
under one private package name, so the user's own interpreter needs nothing of Ferry's and the user's own
``backend``/``tools``/``agent``/``sandbox`` packages are the ones their code imports."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from tools.probe.dump import ProbeDump
from tools.profile.profile_doc import ProfileDoc
from tools.runner.api import run
from tools.runner.models import RunRequest

OWN = ("backend", "tools", "agent", "sandbox")  # a user's packages named like Ferry's top-level folders

TRAIN = """\
import json, sys
import torch
import backend.models, tools.data, agent.policy, sandbox.box

dev = "cuda" if torch.cuda.is_available() else ("tpx" if hasattr(torch, "tpx") else "cpu")
torch.manual_seed(0)
model = backend.models.make().to(dev)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
for step, (x, y) in enumerate(tools.data.batches(dev)):
    loss = torch.nn.functional.mse_loss(model(x), y)
    opt.zero_grad()
    loss.backward()
    opt.step()
    print(f"step {step} loss {loss.item():.5f}")
print("OWN", json.dumps({"backend": backend.models.WHO, "tools": tools.data.WHO, "agent": agent.policy.WHO,
                         "sandbox": sandbox.box.WHO}))
print("FERRY_NAMES", json.dumps(sorted(
    m for m in sys.modules
    if m.split(".")[0] in ("backend", "tools", "agent", "sandbox", "backend_autoload", "cuda_semantics", "evals",
                           "pydantic")
    and not (getattr(sys.modules[m], "__file__", None) or "").startswith(sys.path[0]))))
"""


def write_repo(root: Path) -> Path:
    """A CUDA training script whose repository has its own backend/, tools/, agent/, sandbox/ packages."""
    for name in OWN:
        (root / name).mkdir(parents=True)
        (root / name / "__init__.py").write_text(f"WHO = 'user {name}'\n")
    (root / "backend" / "models.py").write_text(
        "import torch\nWHO = 'user backend.models'\n"
        "def make():\n"
        "    return torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.Tanh(), torch.nn.Linear(16, 1))\n")
    (root / "tools" / "data.py").write_text(
        "import torch\nWHO = 'user tools.data'\n"
        "def batches(dev, n=3):\n    g = torch.Generator().manual_seed(1)\n"
        "    for _ in range(n):\n        x = torch.randn(16, 8, generator=g)\n"
        "        yield x.to(dev), x.sum(1, keepdim=True).to(dev)\n")
    (root / "agent" / "policy.py").write_text("WHO = 'user agent.policy'\n")
    (root / "sandbox" / "box.py").write_text("WHO = 'user sandbox.box'\n")
    (root / "train.py").write_text(TRAIN)
    return root


@pytest.fixture(scope="module")
def repo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_repo(tmp_path_factory.mktemp("own-names") / "repo")


def _line(out: str, tag: str) -> object:
    return json.loads(next(x for x in out.splitlines() if x.startswith(tag + " ")).split(" ", 1)[1])


EXPECTED_OWN = {"backend": "user backend.models", "tools": "user tools.data", "agent": "user agent.policy",
                "sandbox": "user sandbox.box"}


def test_the_torch_only_venv_has_no_pydantic_and_no_ferry(torch_only_python: Path):
    proc = subprocess.run([str(torch_only_python), "-c", "import torch; print(torch.__version__)"],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0 and proc.stdout.startswith("2.13.0"), proc.stderr
    for name in ("pydantic", "tools", "backend", "agent", "libcst"):
        proc = subprocess.run([str(torch_only_python), "-c", f"import {name}"], capture_output=True, text=True,
                              timeout=60, cwd="/")
        assert proc.returncode != 0 and "ModuleNotFoundError" in proc.stderr, name


@pytest.mark.parametrize("python", ["ferry", "torch-only"])
def test_the_reference_run_under_the_redirect_imports_the_users_own_packages(
        python: str, repo: Path, tmp_path: Path, torch_only_python: Path):
    res = run(RunRequest(path=repo, command="python train.py", device="cpu", redirect_cuda="cpu", probe=True,
                         python=torch_only_python if python == "torch-only" else None,
                         artifacts_dir=tmp_path / "art", timeout_s=180))
    assert res.status == "ok", res.stderr_tail
    assert _line(res.stdout_tail, "OWN") == EXPECTED_OWN
    assert _line(res.stdout_tail, "FERRY_NAMES") == []  # nothing of Ferry's under a name of the user's
    assert "ferry bootstrap" not in res.stderr_tail, res.stderr_tail
    assert res.probe_dir is not None and (res.probe_dir / "index.json").is_file()
    assert ProbeDump(res.probe_dir).events  # the probe recorded the steps


def test_a_tpx_run_with_probe_and_profile_in_a_torch_only_venv(repo: Path, tmp_path: Path, torch_only_python: Path):
    """Item 2: the probe and the profiler work in an interpreter with torch and nothing else; item 3: the
    user's own backend/ is theirs while tpx (Ferry's backend, under its private name) computes."""
    res = run(RunRequest(path=repo, command="python train.py", device="tpx", probe=True, profile=True,
                         python=torch_only_python, artifacts_dir=tmp_path / "art", timeout_s=240))
    assert res.status == "ok", res.stderr_tail
    assert "ferry bootstrap" not in res.stderr_tail, res.stderr_tail
    assert _line(res.stdout_tail, "OWN") == EXPECTED_OWN
    assert _line(res.stdout_tail, "FERRY_NAMES") == []
    assert res.probe_dir is not None and (res.probe_dir / "index.json").is_file()
    dump = ProbeDump(res.probe_dir)
    assert dump.events and dump.meta.get("tpx") is not None  # the tpx op statistics reached the dump
    assert res.profile_dir is not None
    doc = ProfileDoc.model_validate_json((res.profile_dir / "profile.json").read_text())
    assert doc.tpx is not None and doc.tpx.ops  # the host validates what the child wrote as plain dicts


def test_torch_compile_backend_tpx_never_imports_ferry_by_a_bare_name(tmp_path: Path, torch_only_python: Path):
    """``backend="tpx"`` resolves in a user's interpreter (no entry point of Ferry's there) and in Ferry's
    own (whose entry point would import ``backend.compile`` by its bare name: the user's backend/)."""
    root = write_repo(tmp_path / "repo")
    (root / "compiled.py").write_text(
        "import sys, torch, backend\n"
        "f = torch.compile(lambda x: torch.sin(x) * 2, backend='tpx')\n"
        "print('SUM', round(f(torch.ones(4, device='tpx')).sum().item(), 4))\n"
        "print('BARE', [m for m in sys.modules if m.split('.')[0] in ('backend', 'tools') and m not in"
        " ('backend', 'backend.models', 'tools', 'tools.data')])\n")
    for python in (None, torch_only_python):
        res = run(RunRequest(path=root, command="python compiled.py", device="tpx", python=python,
                             artifacts_dir=tmp_path / f"art-{python is None}", timeout_s=240))
        assert res.status == "ok", res.stderr_tail
        lines = dict(x.split(" ", 1) for x in res.stdout_tail.splitlines() if x.startswith(("SUM ", "BARE ")))
        assert lines == {"SUM": "6.7318", "BARE": "[]"}, res.stdout_tail
