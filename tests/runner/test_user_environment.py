"""The user's own environment in a run: another interpreter (RunRequest.python), the user's variables
(user_env) and a working directory inside the repository (cwd); each checked before anything runs."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest
from pydantic import ValidationError

from tools.runner.api import RunnerInputError, run
from tools.runner.interpreter import Interpreter, InterpreterError, default_python, inspect_interpreter
from tools.runner.models import RunRequest


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    src = tmp_path / "repo"
    (src / "lib").mkdir(parents=True)
    (src / "examples" / "mnist").mkdir(parents=True)
    (src / "lib" / "helpers.py").write_text("VALUE = 'from-lib'\n")
    (src / "who.py").write_text(
        "import os, sys\nimport torch\n"
        "print('PREFIX', sys.prefix)\nprint('TORCH', torch.__version__)\n"
        "print('FOO', os.environ.get('FOO'))\n"
    )
    (src / "examples" / "mnist" / "train.py").write_text(
        "import os\nimport helpers\nprint('CWD', os.getcwd())\nprint('HELPER', helpers.VALUE)\n")
    return src


def _run(repo: Path, cmd: str, tmp_path: Path, **kw: object):
    return run(RunRequest(path=repo, command=cmd, device=kw.pop("device", "cpu"),  # type: ignore[arg-type]
                          artifacts_dir=tmp_path / "art", timeout_s=120, **kw))  # type: ignore[arg-type]


def _line(out: str, tag: str) -> str:
    return next(x for x in out.splitlines() if x.startswith(tag + " ")).split(" ", 1)[1]


def test_the_code_runs_with_the_users_interpreter(repo: Path, tmp_path: Path, venv_python: Path):
    res = _run(repo, "python who.py", tmp_path, python=venv_python)
    assert res.status == "ok", res.stderr_tail
    assert Path(_line(res.stdout_tail, "PREFIX")) == venv_python.parent.parent  # not Ferry's venv
    assert _line(res.stdout_tail, "TORCH").startswith("2.13.0")
    assert res.python == str(venv_python) and not res.warm_start
    assert res.warm_fallback is not None and str(venv_python) in res.warm_fallback  # warm starts are Ferry's own
    own = _run(repo, "python who.py", tmp_path)
    assert Path(_line(own.stdout_tail, "PREFIX")) == Path(sys.prefix) and own.python == sys.executable


def test_tpx_loads_in_an_interpreter_without_ferry(repo: Path, tmp_path: Path, venv_python: Path):
    (repo / "dev.py").write_text("import torch\nx = torch.ones(4, device='tpx') * 2\nprint('SUM', x.sum().item())\n")
    res = _run(repo, "python dev.py", tmp_path, python=venv_python, device="tpx")
    assert res.status == "ok", res.stderr_tail
    assert _line(res.stdout_tail, "SUM") == "8.0"


def test_user_variables_and_working_directory_reach_the_run(repo: Path, tmp_path: Path):
    res = _run(repo, "python train.py", tmp_path, cwd="examples/mnist", user_env={"PYTHONPATH": "../../lib"})
    assert res.status == "ok", res.stderr_tail
    assert _line(res.stdout_tail, "CWD").endswith("/examples/mnist") and res.cwd == "examples/mnist"
    assert _line(res.stdout_tail, "HELPER") == "from-lib"  # the user's PYTHONPATH, after Ferry's bootstrap
    assert res.warm_fallback is None or "PYTHONPATH" in res.warm_fallback
    res = _run(repo, ["python", "who.py"], tmp_path, user_env={"FOO": "bar baz"})
    assert res.status == "ok" and _line(res.stdout_tail, "FOO") == "bar baz", res.stderr_tail
    without = _run(repo, "python train.py", tmp_path)  # from the root the script is not there
    assert without.status == "failed"


@pytest.mark.parametrize("cwd", ["../elsewhere", "/etc", "examples/../../x", ""])
def test_a_working_directory_outside_the_repository_is_refused(cwd: str, repo: Path):
    with pytest.raises(ValidationError, match="working directory"):
        RunRequest(path=repo, command="python who.py", cwd=cwd)


def test_a_working_directory_the_repository_lacks_is_refused(repo: Path, tmp_path: Path):
    with pytest.raises(RunnerInputError, match="not a directory of the repository"):
        _run(repo, "python who.py", tmp_path, cwd="no/such/dir")
    (repo / "out").symlink_to("/etc")  # a link of the repository's own may not lead the run out of it
    with pytest.raises(RunnerInputError, match="leaves the repository"):
        _run(repo, "python who.py", tmp_path, cwd="out")


@pytest.mark.parametrize(("key", "why"), [
    ("FERRY_SEED", "Ferry's own settings"), ("TPX_STRICT", "Ferry's own settings"), ("PATH", "set by the runner"),
    ("HOME", "set by the runner"), ("PYTEST_ADDOPTS", "set by the runner"), ("WANDB_API_KEY", "credential"),
    ("1BAD", "not a variable name"),
])
def test_variables_the_runner_owns_are_refused(key: str, why: str, repo: Path):
    with pytest.raises(ValidationError, match=why):
        RunRequest(path=repo, command="python who.py", user_env={key: "x"})


def test_a_bad_interpreter_is_refused_with_what_to_do(tmp_path: Path, make_user_venv):
    with pytest.raises(InterpreterError, match="no such file"):
        inspect_interpreter(tmp_path / "nope" / "python")
    with pytest.raises(InterpreterError, match="is a directory"):
        inspect_interpreter(tmp_path)
    script = tmp_path / "fake-python"
    script.write_text("#!/bin/sh\necho hello\n")
    with pytest.raises(InterpreterError, match="not executable"):
        inspect_interpreter(script)
    script.chmod(0o755)
    with pytest.raises(InterpreterError, match="not a Python 3 interpreter"):
        inspect_interpreter(script)
    bare = make_user_venv(tmp_path / "bare", torch=False)
    with pytest.raises(InterpreterError, match="has no torch") as exc:
        inspect_interpreter(bare)
    assert f"{bare} -m pip install torch==2.13.0" in str(exc.value)


def test_the_runner_refuses_a_bad_interpreter_before_running(repo: Path, tmp_path: Path, make_user_venv):
    with pytest.raises(RunnerInputError, match="has no torch"):
        _run(repo, "python who.py", tmp_path, python=make_user_venv(tmp_path / "bare", torch=False))


def test_the_default_is_the_active_virtualenvs_interpreter(tmp_path: Path, venv_python: Path):
    assert default_python({"VIRTUAL_ENV": str(venv_python.parent.parent)}) == str(venv_python)
    assert default_python({"VIRTUAL_ENV": sys.prefix}) == sys.executable  # Ferry's own venv
    assert default_python({}) == sys.executable
    assert default_python({"VIRTUAL_ENV": str(tmp_path / "gone")}) == sys.executable
    assert inspect_interpreter(sys.executable).is_ferrys and not inspect_interpreter(venv_python).is_ferrys
    assert os.access(venv_python, os.X_OK)


def test_checking_an_interpreter_runs_none_of_its_environments_code_on_the_host(tmp_path: Path, make_user_venv):
    """A .pth file in the venv (run by ``site`` at every start) must run only in the sandbox: the
    host-side check starts the interpreter without site, yet still finds its torch."""
    python = make_user_venv(tmp_path / "venv")
    marker = tmp_path / "ran-on-the-host"
    site_dir = next((tmp_path / "venv" / "lib").glob("python3*/site-packages"))
    (site_dir / "zz_hostile.pth").write_text(f"import pathlib; pathlib.Path({str(marker)!r}).write_text('x')\n")
    interp = inspect_interpreter(python)
    assert not marker.exists()
    assert interp.torch is not None and interp.torch.startswith("2.13.0")
    assert Path(interp.prefix) == tmp_path / "venv" and not interp.has_pytest


def test_an_interpreter_linked_from_a_private_dir_shows_only_its_dirs(tmp_path: Path, venv_python: Path):
    """``~/bin/python`` -> a venv's python: the run sees that bin dir and the venv, not the home dir."""
    home = tmp_path / "home"
    (home / "bin").mkdir(parents=True)
    (home / "bin" / "python").symlink_to(venv_python)
    venv = inspect_interpreter(venv_python)
    linked = Interpreter(path=str(home / "bin" / "python"), version=venv.version, prefix=venv.prefix,
                         base_prefix=venv.base_prefix, exec_prefix=venv.exec_prefix, torch=venv.torch,
                         has_pytest=False)
    roots = linked.roots()
    assert home not in roots and home / "bin" in roots and Path(venv.prefix) in roots
    assert all(r == home / "bin" or home not in r.parents for r in roots)
    assert venv.roots() == sorted({Path(venv.prefix), Path(venv.base_prefix).resolve()})  # nothing beside them


def test_a_user_pythonpath_is_checked_like_any_other_variable(repo: Path):
    """PYTHONPATH is merged after Ferry's bootstrap dir, not exempt from the checks (a NUL byte)."""
    with pytest.raises(ValidationError, match="NUL byte"):
        RunRequest(path=repo, command="python who.py", user_env={"PYTHONPATH": "src\0lib"})
    assert RunRequest(path=repo, command="python who.py", user_env={"PYTHONPATH": "src"}).user_env == {
        "PYTHONPATH": "src"}


@pytest.mark.parametrize("device", ["cpu", "tpx"])
def test_no_run_sees_a_real_gpu_even_when_the_user_asks(device: str, tmp_path: Path) -> None:
    """The reference run and the CPU check must compute on CPU, a target run on tpx: a GPU of the host is hidden,
    also against the user's own CUDA_VISIBLE_DEVICES."""
    from tools.runner.env import HIDDEN_GPUS, child_env

    env = child_env(workspace=tmp_path, device=device, redirect_cuda="cpu" if device == "cpu" else None, seed=0,
                    redirect_log=None, probe_dir=None, profile_dir=None, junit_xml=None, caller_env={},
                    user_env={"CUDA_VISIBLE_DEVICES": "0", "DATA_DIR": "/data"})
    assert {k: env[k] for k in HIDDEN_GPUS} == dict.fromkeys(HIDDEN_GPUS, "")
    assert env["DATA_DIR"] == "/data"  # the user's other variables are kept


def test_the_users_own_sitecustomize_still_runs(repo: Path, tmp_path: Path, venv_python: Path):
    """Ferry's bootstrap is a sitecustomize, and `site` imports one module of that name: the user's
    own (here on their PYTHONPATH, after Ferry's) runs after it, with its errors reported, not fatal."""
    (repo / "lib" / "sitecustomize.py").write_text("import os\nos.environ['USER_SITE_HOOK'] = 'ran'\n")
    (repo / "hook.py").write_text(
        "import os, sys, torch\nprint('HOOK', os.environ.get('USER_SITE_HOOK'))\n"
        "print('DEVICE', torch.ones(1, device='tpx').device)\n"
        "print('GUEST', '_ferry_guest' in sys.modules)\n")
    res = _run(repo, "python hook.py", tmp_path, python=venv_python, device="tpx", user_env={"PYTHONPATH": "lib"})
    assert res.status == "ok", res.stderr_tail
    assert _line(res.stdout_tail, "HOOK") == "ran"
    assert _line(res.stdout_tail, "DEVICE") == "tpx:0" and _line(res.stdout_tail, "GUEST") == "True"
    (repo / "lib" / "sitecustomize.py").write_text("raise ValueError('broken hook')\n")
    res = _run(repo, "python hook.py", tmp_path, python=venv_python, device="tpx", user_env={"PYTHONPATH": "lib"})
    assert res.status == "ok", res.stderr_tail
    assert _line(res.stdout_tail, "HOOK") == "None" and "ValueError: broken hook" in res.stderr_tail
