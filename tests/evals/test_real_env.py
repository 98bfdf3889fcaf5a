"""The real suite's per-case interpreters (evals.real_env): a venv with torch 2.13.0 and the
repository's own requirements, nothing of Ferry's. These tests build the torch-only venv (no
network: torch's files are linked from Ferry's own environment, nothing is installed with pip)."""

from __future__ import annotations

import importlib.metadata as md
import json
import subprocess
import sys
from pathlib import Path

import pytest

from evals.cases import RealCase
from evals.real_env import (
    MARKER,
    VenvError,
    case_python,
    check_venv,
    link_distributions,
    parse_requirements,
    requirements_of,
    torch_closure,
)
from evals.real_suite import prepare
from tools.runner.interpreter import inspect_interpreter


@pytest.fixture(scope="module")
def cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("venvs")


@pytest.fixture(scope="module")
def torch_only(cache: Path) -> Path:
    return case_python([], cache)


def _run(python: Path, code: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    # as a user runs it: plain `python -c` from a directory of theirs, no PYTHONPATH
    return subprocess.run([str(python), "-c", code], cwd=cwd, capture_output=True, text=True, timeout=300,
                          env={"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8"})


def test_the_case_interpreter_has_torch_2_13_and_nothing_of_ferrys(torch_only: Path, tmp_path: Path) -> None:
    ok = _run(torch_only, "import torch, sys; print(torch.__version__, sys.prefix)", tmp_path)
    assert ok.returncode == 0, ok.stderr
    version, prefix = ok.stdout.split()
    assert version.split("+")[0] == "2.13.0"
    assert Path(prefix) == torch_only.parent.parent  # its own venv, not Ferry's
    for module in ("pydantic", "agent", "tools", "backend", "sandbox", "evals", "ferry"):
        proc = _run(torch_only, f"import {module}", tmp_path)
        assert proc.returncode != 0 and "ModuleNotFoundError" in proc.stderr, (module, proc.stderr)
    site = [str(p) for p in (torch_only.parent.parent / "lib").glob("*/site-packages")]
    names = {d.metadata["Name"].lower() for d in md.distributions(path=site)}
    assert "torch" in names and not names & {"pydantic", "ferry", "torchvision", "triton"}


def test_ferrys_runner_accepts_it_and_its_torchrun_is_its_own(torch_only: Path) -> None:
    interp = inspect_interpreter(torch_only)
    assert interp.torch is not None and interp.torch.startswith("2.13.0")
    assert Path(interp.prefix) == torch_only.parent.parent and not interp.is_ferrys
    torchrun = torch_only.parent / "torchrun"
    assert torchrun.read_text().splitlines()[0] == f"#!{torch_only}"
    proc = subprocess.run([str(torchrun), "--help"], capture_output=True, text=True, timeout=300,
                          env={"PATH": "/usr/bin:/bin"})
    assert proc.returncode == 0 and "nproc" in proc.stdout


def test_a_second_request_reuses_the_cached_venv(cache: Path, torch_only: Path) -> None:
    marker = torch_only.parent.parent / MARKER
    before = marker.stat().st_mtime_ns
    assert case_python([], cache) == torch_only
    assert marker.stat().st_mtime_ns == before
    assert json.loads(marker.read_text())["requirements"] == []


def test_a_venv_where_pydantic_imports_is_refused_unless_the_repository_asks_for_it(tmp_path: Path) -> None:
    venv = tmp_path / "leaky"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    link_distributions([*torch_closure(), md.distribution("pydantic"), md.distribution("pydantic-core")], venv)
    with pytest.raises(VenvError, match="pydantic"):
        check_venv(venv / "bin" / "python", [])
    assert check_venv(venv / "bin" / "python", ["pydantic"])["torch"]


def test_pydantic_pulled_in_by_a_requirement_of_the_repository_is_the_users_own(tmp_path: Path) -> None:
    # transformers/datasets-style closures bring pydantic: a dependency of what the repository asks for
    # is the user's environment, not Ferry leaking into it
    venv = tmp_path / "closure"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    link_distributions([*torch_closure(), md.distribution("pydantic"), md.distribution("pydantic-core"),
                        md.distribution("fastapi")], venv)
    info = check_venv(venv / "bin" / "python", ["fastapi"])
    assert info["pydantic_needed_by"] == ["fastapi"]
    # Ferry's own packages stay refused whatever the closure holds
    (venv / "lib" / f"python{sys.version_info.major}.{sys.version_info.minor}" / "site-packages" / "tools").mkdir()
    with pytest.raises(VenvError, match="tools"):
        check_venv(venv / "bin" / "python", ["fastapi"])


def test_requirements_never_bring_another_torch(tmp_path: Path) -> None:
    (tmp_path / "requirements.txt").write_text(
        "# deps\ntorch>=2.0\ntorchvision==0.28\nnvidia-cublas-cu12\nnumpy<3  # arrays\n-e .\n"
        "--extra-index-url https://example.invalid\ntqdm\n")
    assert requirements_of(["tensorboard", "PyYAML:yaml", "triton"], tmp_path, ["requirements.txt"]) == [
        "PyYAML", "numpy<3", "tensorboard", "tqdm"]
    with pytest.raises(VenvError, match="not a pip requirement"):
        parse_requirements(["numpy>=>1"])
    with pytest.raises(VenvError, match=r"missing\.txt"):
        requirements_of([], tmp_path, ["missing.txt"])


def test_prepare_gives_the_checkout_and_its_own_interpreter(tmp_path: Path, cache: Path, torch_only: Path,
                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    src = tmp_path / "src"
    src.mkdir()
    (src / "train.py").write_text("print('hi')\n")
    git = ["git", "-c", "user.name=t", "-c", "user.email=t@t"]
    for args in (["init", "-q"], ["add", "-A"], ["commit", "-q", "-m", "c"]):
        subprocess.run([*git, *args], cwd=src, check=True, capture_output=True)
    commit = subprocess.run(["git", "rev-parse", "HEAD"], cwd=src, check=True, capture_output=True,
                            text=True).stdout.strip()
    subprocess.run(["git", "clone", "-q", "--bare", str(src), str(tmp_path / "mirror" / "o+r" / "repo")], check=True)
    monkeypatch.setenv("FERRY_EVAL_VENV_CACHE", str(cache))
    case = RealCase.model_validate({"name": "c", "repo": "o/r", "commit": commit, "run": "python train.py"})
    work, python = prepare(case, tmp_path / "mirror", tmp_path / "checkout")
    assert (work / "train.py").is_file()
    assert python == torch_only
