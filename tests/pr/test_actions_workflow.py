"""The GitHub Actions workflow in examples/ runs `ferry pr` with flags Ferry's own parser takes, pushes
the branch before the pull request step, and refuses to start without a run command; it installs Ferry
only from a pinned source the user controls, the repository's own dependencies into the runs'
interpreter, and stops when the sandbox is weaker than the job requires. The whole job runs here once,
its `run:` steps in order, with the network's parts pointed at local equivalents."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from agent.cli import build_parser
from tests.agent.test_pr_cmd import PROG

ROOT = Path(__file__).resolve().parents[2]
WORKFLOW = ROOT / "examples" / "github-actions" / "ferry-pr.yml"


def _workflow() -> dict:
    return yaml.safe_load(WORKFLOW.read_text())


def _step(name_part: str) -> dict:
    steps = _workflow()["jobs"]["migrate"]["steps"]
    return next(s for s in steps if name_part in s.get("name", ""))


def _ferry_argv(script: str, env: dict[str, str]) -> tuple[int, list[str]]:
    """The argv the step's script gives `ferry` (a shell function records it), and the script's status."""
    proc = subprocess.run(["bash", "-c", 'ferry() { printf "%s\\0" "$@"; }\n' + script],
                          env={"PATH": os.environ["PATH"], **env}, capture_output=True, text=True, timeout=30)
    return proc.returncode, [a for a in proc.stdout.split("\0") if a]


def test_the_workflow_runs_on_demand_and_on_a_schedule_with_the_rights_it_needs():
    wf = _workflow()
    on = wf[True] if True in wf else wf["on"]  # YAML 1.1 reads the key `on` as true
    assert "workflow_dispatch" in on and on["schedule"][0]["cron"]
    assert wf["permissions"] == {"contents": "write", "pull-requests": "write"}
    assert wf["concurrency"]["cancel-in-progress"] is False
    names = [s.get("name", s.get("uses", "")) for s in wf["jobs"]["migrate"]["steps"]]
    assert names.index("Migrate into ferry/migrate-tpx and push it") < names.index("Open or update the pull request")


def test_the_ferry_pr_command_of_the_workflow_parses_with_ferrys_own_parser():
    script = _step("Migrate")["run"]
    env = {"FERRY_RUN": "python train.py --steps 8", "FERRY_TEST": "python -m pytest -q", "BASE": "main",
           "BRANCH": "ferry/migrate-tpx", "RUNNER_TEMP": "/tmp/runner"}
    rc, argv = _ferry_argv(script, env)
    assert rc == 0 and argv[:2] == ["pr", "."]
    args = build_parser().parse_args(argv)
    assert (args.run, args.test, args.base, args.branch, args.push, args.out, args.python) == (
        "python train.py --steps 8", "python -m pytest -q", "main", "ferry/migrate-tpx", "origin",
        "/tmp/runner/ferry-out", "/tmp/runner/project-venv/bin/python")
    assert args.author == "ferry[bot] <ferry-bot@users.noreply.github.com>"
    rc, argv = _ferry_argv(script, {**env, "FERRY_TEST": ""})
    assert rc == 0 and build_parser().parse_args(argv).test is None
    rc, argv = _ferry_argv(script, {**env, "FERRY_RUN": ""})
    assert rc == 2 and argv == []  # no run command: the job stops before ferry, saying what to set


def _bash(script: str, env: dict[str, str], cwd: Path | None = None,
          timeout: float = 30) -> subprocess.CompletedProcess:
    """A `run:` step as Actions runs it (bash, -e, pipefail)."""
    return subprocess.run(["bash", "--noprofile", "--norc", "-eo", "pipefail", "-c", script], cwd=cwd,
                          env=env, capture_output=True, text=True, timeout=timeout)


@pytest.mark.parametrize("source, why", [
    ("", "set the repository variable FERRY_SOURCE"),
    ("ferry", "is neither a git URL at a commit nor a file of this repository"),
    ("ferry==0.1.0", "is neither a git URL at a commit nor a file of this repository"),
    ("git+https://github.com/your-org/ferry@main", "names no commit"),
    ("ferry @ git+https://github.com/your-org/ferry", "names no commit"),
])
def test_ferry_is_installed_only_from_a_pinned_source_never_from_a_bare_name(tmp_path, source, why):
    pip_log = tmp_path / "pip.log"
    script = f'python() {{ echo "$*" >> {pip_log}; }}\nferry() {{ :; }}\n' + _step("Install Ferry")["run"]
    res = _bash(script, {"PATH": os.environ["PATH"], "FERRY_SOURCE": source, "FERRY_TORCH_INDEX": "https://x"},
                cwd=tmp_path)
    assert res.returncode == 2 and why in res.stderr and not pip_log.exists(), res.stderr
    pinned = "git+https://github.com/your-org/ferry@" + "0123456789abcdef" * 2 + "01234567"
    res = _bash(script, {"PATH": os.environ["PATH"], "FERRY_SOURCE": pinned, "FERRY_TORCH_INDEX": "https://x"})
    assert res.returncode == 0, res.stderr
    assert pip_log.read_text().splitlines() == ["-m pip install --index-url https://x torch==2.13.0",
                                                f"-m pip install ferry @ {pinned}"]
    assert "'ferry'" not in yaml.safe_load(WORKFLOW.read_text())["jobs"]["migrate"]["env"]["FERRY_SOURCE"]


def test_the_job_stops_when_the_sandbox_is_weaker_than_it_requires(tmp_path):
    doctor = json.dumps({"isolation": {"level": "rlimits", "error": None,
                                       "reasons": ["bwrap: setting up uid map: Permission denied"]}})
    script = f"ferry() {{ printf '%s' '{doctor}'; }}\n" + _step("ferry doctor")["run"]
    env = {"PATH": os.environ["PATH"], "RUNNER_TEMP": str(tmp_path), "FERRY_SANDBOX_ISOLATION": "bwrap"}
    res = _bash(script, env)
    assert res.returncode == 1, res.stdout + res.stderr
    assert "requires the sandbox level bwrap, this runner has rlimits: bwrap: setting up uid map" in res.stderr
    res = _bash(script, {**env, "FERRY_SANDBOX_ISOLATION": "rlimits"})
    assert res.returncode == 0 and "sandbox: rlimits, as required" in res.stdout, res.stderr


def test_the_workflow_says_how_to_get_ci_on_ferrys_pull_request():
    text = WORKFLOW.read_text()
    assert "GITHUB_TOKEN triggers\n# no workflow" in text and "FERRY_PR_TOKEN" in text
    wf = _workflow()
    steps = wf["jobs"]["migrate"]["steps"]
    assert steps[0]["with"]["token"] == _step("Open or update")["env"]["GH_TOKEN"] == \
        "${{ secrets.FERRY_PR_TOKEN || github.token }}"
    assert "kernel.apparmor_restrict_unprivileged_userns=0" in _step("bubblewrap")["run"]
    assert wf["jobs"]["migrate"]["env"]["FERRY_SANDBOX_ISOLATION"].startswith("${{ vars.FERRY_ISOLATION")


def test_an_open_pull_request_is_edited_only_when_its_text_changes(tmp_path):
    out = tmp_path / "ferry-out"
    out.mkdir()
    (out / "pr.md").write_text("# Migrate CUDA code\n\nbody\n")
    log = tmp_path / "gh.log"
    env = {"PATH": os.environ["PATH"], "RUNNER_TEMP": str(tmp_path), "BRANCH": "ferry/migrate-tpx", "BASE": "main"}

    def run(shown: str) -> list[str]:
        log.unlink(missing_ok=True)
        gh = (f'gh() {{ echo "$*" >> {log}; case "$1 $2" in "pr list") echo 7;; '
              f'"pr view") printf "%s" "{shown}";; esac; }}\n')
        res = _bash(gh + _step("Open or update")["run"], env)
        assert res.returncode == 0, res.stderr
        return [line.split(" --")[0] for line in log.read_text().splitlines()]

    assert run("Migrate CUDA code\n# Migrate CUDA code\n\nbody") == ["pr list", "pr view 7"]
    assert run("Migrate CUDA code\n# Migrate CUDA code\n\nolder body") == ["pr list", "pr view 7", "pr edit 7"]


# --- the whole job, here -------------------------------------------------------------------------

# test_pr_cmd's exactly representable program (parity holds without a policy edit), with a dependency of its own
SAMPLE_TRAIN = "import anytree\n" + PROG.replace(
    'device = torch.device("cuda")\n',
    'device = torch.device("cuda")\n'
    'tree = anytree.Node("root")  # the repository\'s own dependency: the runs need its requirements installed\n')
SAMPLE_TEST = '''import anytree
import torch


def test_ones():
    assert torch.ones(2).cuda().sum().item() == 2


def test_tree():
    assert anytree.Node("a").name == "a"
'''
GH = '''#!/bin/sh
# gh, as far as the workflow uses it: no pull request yet; each call recorded
printf '%s\\n' "$*" >> "$GH_LOG"
'''


def _local_index() -> str | None:
    """The package index pip uses here, when it is on this machine (file://): torch comes from it."""
    found = os.environ.get("FERRY_TEST_TORCH_INDEX") or os.environ.get("PIP_INDEX_URL")
    if not found:
        for key in ("global.index-url", "global.extra-index-url"):
            res = subprocess.run([sys.executable, "-m", "pip", "config", "get", key], capture_output=True, text=True)
            if res.returncode == 0 and res.stdout.split():
                found = res.stdout.split()[0]
                break
    return found if found and found.startswith("file://") else None


def _git(cwd: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(cwd), *args], capture_output=True, text=True, check=True).stdout.strip()


def _local_value(expr: str, local: dict[str, str]) -> str:
    """A `${{ ... }}` value as this test's local equivalent (the variable's name picks it)."""
    for name, value in local.items():
        if name in expr:
            return value
    raise AssertionError(f"no local value for {expr}")


@pytest.mark.slow
def test_the_jobs_run_steps_in_order_install_the_projects_dependencies_check_the_sandbox_and_write_the_pr(
        tmp_path):
    from sandbox.isolation import detect

    index = _local_index()
    if index is None:
        pytest.skip("no package index on this machine (file://): the job's installs would need the network")
    # the repository under migration, with its own requirements, on a remote; the checkout step is a clone
    sample = tmp_path / "sample"
    for rel, text in {"train.py": SAMPLE_TRAIN, "tests/test_train.py": SAMPLE_TEST,
                      "requirements.txt": "anytree\npytest\n"}.items():
        (sample / rel).parent.mkdir(parents=True, exist_ok=True)
        (sample / rel).write_text(text)
    _git(sample.parent, "init", "-q", "-b", "main", str(sample))
    _git(sample, "add", ".")
    _git(sample, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "-m", "init")
    remote = tmp_path / "remote.git"
    _git(tmp_path, "clone", "-q", "--bare", str(sample), str(remote))
    work = tmp_path / "work"
    _git(tmp_path, "clone", "-q", str(remote), str(work))
    # setup-python: a fresh interpreter first on PATH; the pinned source: this checkout (a copy, so pip
    # builds nothing inside it); gh: a stand-in that records its calls
    subprocess.run([sys.executable, "-m", "venv", str(tmp_path / "python")], check=True)
    source = tmp_path / "ferry-src"
    shutil.copytree(ROOT, source, ignore=shutil.ignore_patterns(".venv", ".git", "__pycache__", "*.egg-info",
                                                                 "build", "dist", ".pytest_cache"))
    shim = tmp_path / "shim"
    shim.mkdir()
    (shim / "gh").write_text(GH)
    (shim / "gh").chmod(0o755)
    runner_temp = tmp_path / "runner-temp"
    runner_temp.mkdir()
    level = detect().level
    local = {"FERRY_SOURCE": str(source), "inputs.run": "python train.py", "inputs.test": "python -m pytest -q tests",
             "FERRY_REQUIREMENTS": "", "FERRY_TORCH_INDEX": index, "FERRY_ISOLATION": level, "github.ref_name": "main",
             "FERRY_PR_TOKEN": "token"}
    job = _workflow()["jobs"]["migrate"]
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("FERRY_", "VIRTUAL_ENV", "GIT_", "PYTHON")) and k != "PATH"}
    env.update({k: _local_value(v, local) if "${{" in str(v) else str(v) for k, v in job["env"].items()})
    env.update({"PATH": f"{tmp_path / 'python' / 'bin'}:{shim}:{os.environ['PATH']}", "RUNNER_TEMP": str(runner_temp),
                "GH_LOG": str(tmp_path / "gh.log"), "FERRY_STATE_DIR": str(tmp_path / "state")})
    assert env["FERRY_SANDBOX_ISOLATION"] == level and env["BRANCH"] == "ferry/migrate-tpx"

    ran = []
    for step in job["steps"]:
        if "run" not in step:
            assert step["uses"].split("@")[0] in ("actions/checkout", "actions/setup-python", "actions/upload-artifact")
            continue
        step_env = {**env, **{k: _local_value(v, local) for k, v in step.get("env", {}).items()}}
        res = _bash(step["run"], step_env, cwd=work, timeout=900)
        assert res.returncode == 0, (step["name"], res.stdout[-3000:], res.stderr[-3000:])
        ran.append((step["name"], res.stdout))
    names = [name for name, _ in ran]
    assert names == ["Let bubblewrap sandbox the runs", "Install Ferry from its pinned source",
                     "Install the repository's own dependencies", "Check the sandbox (ferry doctor)",
                     "Migrate into ferry/migrate-tpx and push it", "Open or update the pull request"]

    # the project's dependencies went into the runs' interpreter, not into Ferry's
    project = runner_temp / "project-venv" / "bin" / "python"
    assert subprocess.run([str(project), "-c", "import anytree, pytest, torch; assert torch.__version__.startswith("
                                               "'2.13.0')"]).returncode == 0
    assert subprocess.run([str(tmp_path / "python" / "bin" / "python"), "-c", "import anytree"],
                          capture_output=True).returncode != 0
    assert f"sandbox: {level}, as required" in dict(ran)["Check the sandbox (ferry doctor)"]
    # the branch is on the remote, and the pull request was opened with pr.md as its text
    head = _git(remote, "rev-parse", "refs/heads/ferry/migrate-tpx")
    assert _git(remote, "merge-base", head, "main") == _git(remote, "rev-parse", "main")
    pr_md = runner_temp / "ferry-out" / "pr.md"
    text = pr_md.read_text()
    gh = (tmp_path / "gh.log").read_text().splitlines()
    assert gh[0].startswith("pr list --head ferry/migrate-tpx --base main")
    assert gh[1] == ("pr create --head ferry/migrate-tpx --base main --title Migrate CUDA code to device-generic "
                     f"PyTorch (verified on tpx) --body-file {pr_md}")
    assert "**Status:** migrated" in text and "tests pass (2 tests ran: 2 passed)" in text
    assert "**parity: pass, " in text
    reproduce = text.split("## Reproduce", 1)[1]
    assert "ferry pr . --base main --run 'python train.py' --test 'python -m pytest -q tests'" in reproduce
    assert not any(flag in reproduce for flag in ("--out", "--state-dir", "--json", str(tmp_path)))
