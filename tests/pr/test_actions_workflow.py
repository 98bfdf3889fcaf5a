"""The GitHub Actions workflow in examples/ runs `ferry pr` with flags Ferry's own parser takes, pushes
the branch before the pull request step, and refuses to start without a run command."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import yaml

from agent.cli import build_parser

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
    assert (args.run, args.test, args.base, args.branch, args.push, args.out) == (
        "python train.py --steps 8", "python -m pytest -q", "main", "ferry/migrate-tpx", "origin",
        "/tmp/runner/ferry-out")
    assert args.author == "ferry[bot] <ferry-bot@users.noreply.github.com>"
    rc, argv = _ferry_argv(script, {**env, "FERRY_TEST": ""})
    assert rc == 0 and build_parser().parse_args(argv).test is None
    rc, argv = _ferry_argv(script, {**env, "FERRY_RUN": ""})
    assert rc == 2 and argv == []  # no run command: the job stops before ferry, saying what to set
