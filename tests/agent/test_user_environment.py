"""The user's own environment on migrate / check / run: --python, --env, --cwd checked (exit 2 with what
to do), kept in the options and the result, and what the interpreter lacks is failed_environment
naming the package, THAT interpreter and the pip command for it (never needs_llm)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from agent.migration.environment import environment_failure, missing_test_runner
from agent.policy.base import Diagnosis

ROOT = Path(__file__).resolve().parents[2]



def _ferry(*args: str, env: dict[str, str] | None = None, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    base = {k: v for k, v in os.environ.items() if k != "VIRTUAL_ENV"}
    return subprocess.run([sys.executable, "-m", "agent.cli", *args], cwd=ROOT, capture_output=True, text=True,
                          timeout=timeout, env={**base, **(env or {})})


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    src = tmp_path / "repo"
    (src / "sub").mkdir(parents=True)
    (src / "train.py").write_text("import torch\nprint(torch.ones(2).cuda().sum().item())\n")
    return src


@pytest.mark.parametrize("command", ["migrate", "check", "run"])
@pytest.mark.parametrize(("option", "value", "message"), [
    ("--python", "/no/such/python", "no such file"),
    ("--python", "/etc", "is a directory"),
    ("--cwd", "../outside", "must stay inside the repository"),
    ("--cwd", "/etc", "must be relative to the repository"),
    ("--cwd", "missing", "is not a directory of the repository"),
    ("--env", "PATH=/evil", "set by the runner"),
    ("--env", "NOVALUE", "use KEY=VALUE"),
    ("--env", "HF_TOKEN=x", "credential"),
])
def test_bad_environment_options_are_exit_2(command: str, option: str, value: str, message: str, repo: Path,
                                            tmp_path: Path):
    tail = {"migrate": ["--run", "python train.py", "--state-dir", str(tmp_path / "s")],
            "check": ["--run", "python train.py"], "run": []}[command]
    cmd = ["--", "python", "train.py"] if command == "run" else []
    r = _ferry(command, str(repo), *tail, option, value, *cmd)
    assert r.returncode == 2, r.stderr[-2000:]
    assert message in r.stderr and "Traceback" not in r.stderr
    assert not (tmp_path / "s").exists() or not list((tmp_path / "s").rglob("reference"))  # nothing ran


def test_ferry_settings_in_migrate_env_point_to_their_place(repo: Path, tmp_path: Path):
    r = _ferry("migrate", str(repo), "--run", "python train.py", "--env", "FERRY_SEED=3",
               "--state-dir", str(tmp_path / "s"))
    assert r.returncode == 2 and "Ferry's own settings" in r.stderr


def test_an_interpreter_without_torch_is_exit_2_with_the_pip_command(repo: Path, tmp_path: Path, make_user_venv):
    bare = make_user_venv(tmp_path / "bare", torch=False)
    r = _ferry("check", str(repo), "--run", "python train.py", "--python", str(bare))
    assert r.returncode == 2 and f"{bare} -m pip install torch==2.13.0" in r.stderr
    # the active virtualenv is the default, and a bad one is named as where the interpreter came from
    r = _ferry("check", str(repo), "--run", "python train.py", env={"VIRTUAL_ENV": str(bare.parent.parent)})
    assert r.returncode == 2 and "has no torch" in r.stderr and "VIRTUAL_ENV" in r.stderr


def test_ferry_run_takes_env_cwd_and_python(repo: Path, tmp_path: Path, venv_python: Path):
    (repo / "sub" / "show.py").write_text("import os, sys\nprint('GOT', os.environ['MY_SETTING'], "
                                          "os.path.basename(os.getcwd()), sys.prefix)\n")
    r = _ferry("run", str(repo), "--device", "cpu", "--python", str(venv_python), "--cwd", "sub",
               "--env", "MY_SETTING=42", "--json", "--", "python", "show.py")
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    out = json.loads(r.stdout)
    assert f"GOT 42 sub {venv_python.parent.parent}" in out["stdout_tail"]
    assert out["python"] == str(venv_python) and out["cwd"] == "sub"


@pytest.mark.parametrize(("output", "runner"), [
    ("/home/u/proj/.venv/bin/python: No module named pytest\n", "pytest"),
    ("/bin/sh: 1: pytest: not found\n", "pytest"),
    ("sh: line 1: pytest: command not found\n", "pytest"),
])
def test_a_missing_test_runner_is_named(output: str, runner: str):
    found = missing_test_runner(output, "/home/u/proj/.venv/bin/python")
    assert found is not None and found.package == runner
    assert found.install_command() == f"/home/u/proj/.venv/bin/python -m pip install {runner}"
    diag = Diagnosis(phase="test", kind="other", message=output)
    assert environment_failure(diag, output, ["t.py"], "/p/python") is not None
    # only a test run's: the program printing the same line is the program's business
    assert environment_failure(Diagnosis(phase="run", kind="other", message=output), output, ["t.py"]) is None


def test_a_failing_test_is_not_a_missing_runner():
    out = "E   ModuleNotFoundError: No module named 'pytest_plugin_of_mine'\nFAILED test_x.py::test_a\n"
    assert missing_test_runner(out) is None


def _migrate_train_py(tmp_path: Path, source: str, python: Path) -> tuple[dict, subprocess.CompletedProcess[str]]:
    """``ferry migrate`` (offline, JSON) of a repository holding only ``train.py``, run with ``python``."""
    repo = tmp_path / "repo"
    repo.mkdir()
    (repo / "train.py").write_text(source)
    r = _ferry("migrate", str(repo), "--run", "python train.py", "--python", str(python), "--json", "--offline",
               "--state-dir", str(tmp_path / "s"), "--out", str(tmp_path / "o"), timeout=600)
    return json.loads(r.stdout), r


@pytest.mark.slow
def test_a_module_missing_from_the_users_interpreter_is_failed_environment(tmp_path: Path, venv_python: Path):
    out, r = _migrate_train_py(tmp_path, "import torch\nimport ferry_absent_pkg\n\nprint(torch.ones(3).cuda())\n",
                               venv_python)
    assert out["status"] == "failed_environment", r.stderr[-2000:]
    assert f"{venv_python} -m pip install ferry-absent-pkg" in out["summary"]
    assert out["python"] == str(venv_python)


@pytest.mark.slow
def test_missing_pytest_in_the_tests_interpreter_is_failed_environment(tmp_path: Path, venv_python: Path):
    """The migration itself works (run from --cwd, with the user's variable); its tests cannot start
    because the user's venv has no pytest: failed_environment with the pip command for that venv."""
    repo = tmp_path / "repo"
    (repo / "app").mkdir(parents=True)
    (repo / "app" / "train.py").write_text(
        "import os\nimport torch\nassert os.environ['APP_MODE'] == 'fast', os.environ.get('APP_MODE')\n"
        "x = torch.ones(4).cuda()\nprint('sum', (x * 2).sum().item())\n")
    (repo / "app" / "test_train.py").write_text("def test_one():\n    assert 1 + 1 == 2\n")
    r = _ferry("migrate", str(repo), "--run", "python train.py", "--test", "python -m pytest -q",
               "--python", str(venv_python), "--cwd", "app", "--env", "APP_MODE=fast", "--json", "--offline",
               "--state-dir", str(tmp_path / "s"), "--out", str(tmp_path / "o"), timeout=600)
    out = json.loads(r.stdout)
    assert out["status"] == "failed_environment", (out.get("summary"), r.stderr[-2000:])
    assert f"{venv_python} -m pip install pytest" in out["summary"] and "test command" in out["summary"]
    assert (out["python"], out["cwd"], out["env"]) == (str(venv_python), "app", {"APP_MODE": "fast"})
    phases = [run["kind"] for run in out["run_log"]]
    assert "reference" in phases and "target" in phases, phases  # both ran from app/ with APP_MODE
    assert all(run["status"] == "ok" for run in out["run_log"] if run["kind"] in ("reference", "target"))
    report = (tmp_path / "o" / "report.md").read_text()
    assert f"- interpreter: `{venv_python}`" in report and "`APP_MODE=fast`" in report


def test_an_interpreter_gone_since_the_start_ends_failed_environment(repo: Path, tmp_path: Path, make_user_venv):
    """``ferry resume`` after the venv was removed: the run is not started, the status names it."""
    from agent.errors import EnvironmentMissing
    from agent.migration import adapters

    gone = make_user_venv(tmp_path / "gone", torch=False)
    with pytest.raises(EnvironmentMissing, match="has no torch") as exc, \
            adapters.run_environment(adapters.RunEnvironment(python=str(gone))):
        adapters.run(repo, "python train.py", device="cpu", redirect_cuda=None, probe=False, profile=False,
                    timeout_s=60, seed=0, artifacts_dir=tmp_path / "art")
    assert exc.value.status == "failed_environment"
    assert not (tmp_path / "art" / "result.json").exists()


def test_the_options_environment_reaches_background_runs_and_survives_the_checkpoint(tmp_path: Path):
    """A node's runs, its background ones (the speculative tests, the reference) included, get the
    migration's --python/--env/--cwd from the state's options, which the checkpoint keeps."""
    from agent.migration import adapters
    from agent.migration.nodes.common import environment_of
    from agent.migration.runs import RunScheduler
    from agent.migration.state import MigrationOptions, dump, options_of
    from tools.runner.models import RunResult

    opts = MigrationOptions(source=str(tmp_path), run_command="python train.py", state_dir=str(tmp_path / "s"),
                            python="/opt/venv/bin/python", env={"APP_MODE": "fast"}, cwd="app")
    state = {"migration_id": "m1", "options": json.loads(json.dumps(dump(opts)))}  # as the checkpoint stores it
    assert options_of(state).model_dump() == opts.model_dump()
    seen: list[adapters.RunEnvironment | None] = []
    done = RunResult(command=["python", "train.py"], exit_code=0, status="ok", duration_s=0.0, stdout_tail="",
                     stderr_tail="", isolation="bwrap")
    runs = RunScheduler()
    try:
        with adapters.run_environment(environment_of(state)):
            assert runs.start("m1:probe", lambda cancel: seen.append(adapters.current_environment()) or done)
        assert runs.join("m1:probe", tmp_path / "none") == done
    finally:
        runs.close()
    assert seen == [adapters.RunEnvironment(python="/opt/venv/bin/python", env={"APP_MODE": "fast"}, cwd="app")]
    assert adapters.current_environment() is None  # set for the node only


def _broken_torch_venv(dest: Path, make_user_venv) -> Path:
    """A venv whose torch is installed (dist-info: 2.13.0) but raises as it imports, as a torch
    whose shared libraries cannot load does."""
    python = make_user_venv(dest)
    purelib = Path(subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                                  capture_output=True, text=True, check=True, timeout=60).stdout.strip())
    (purelib / "torch").unlink()
    (purelib / "torch").mkdir()
    (purelib / "torch" / "__init__.py").write_text(
        "def _load_global_deps():\n"
        "    raise OSError('libtorch_global_deps.so: cannot open shared object file: No such file or directory')\n"
        "\n\n_load_global_deps()\n")
    return python


def test_a_torch_that_fails_to_import_is_named_with_the_reinstall_command():
    out = ("Traceback (most recent call last):\n  File \"/w/train.py\", line 1, in <module>\n    import torch\n"
           "  File \"/venv/lib/python3.11/site-packages/torch/__init__.py\", line 407, in <module>\n"
           "    _load_global_deps()\nOSError: libgomp.so.1: cannot open shared object file\n")
    diag = Diagnosis(phase="run", kind="other", exc_type="OSError",
                     message="libgomp.so.1: cannot open shared object file")
    found = environment_failure(diag, out, ["train.py"], "/venv/bin/python")
    assert found is not None and "OSError: libgomp.so.1" in found.message()
    assert "/venv/bin/python -m pip install --force-reinstall torch==2.13.0" in found.message()
    # the same error raised by the program itself, after torch imported, is the program's
    own = out.replace('  File "/venv/lib/python3.11/site-packages/torch/__init__.py", line 407, in <module>\n'
                      "    _load_global_deps()\n", '  File "/w/train.py", line 9, in <module>\n    load()\n')
    assert environment_failure(diag, own, ["train.py"], "/venv/bin/python") is None
    # an earlier traceback through torch's __init__ that the program survived is not the failure
    assert environment_failure(diag, out + own, ["train.py"], "/venv/bin/python") is None


@pytest.mark.slow
def test_a_migration_whose_torch_fails_to_import_is_failed_environment(tmp_path: Path, make_user_venv):
    python = _broken_torch_venv(tmp_path / "venv", make_user_venv)
    out, r = _migrate_train_py(tmp_path, "import torch\n\nprint(torch.ones(3).cuda().sum().item())\n", python)
    assert out["status"] == "failed_environment", (out.get("summary"), r.stderr[-2000:])
    assert "torch fails to import" in out["summary"] and "libtorch_global_deps.so" in out["summary"]
    assert f"{python} -m pip install --force-reinstall torch==2.13.0" in out["summary"]
