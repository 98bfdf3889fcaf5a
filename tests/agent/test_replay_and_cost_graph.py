"""The whole graph with a scripted model: a recorded trajectory replays to the same patch and status
(`ferry replay`), `ferry trajectory` prints it, and the cost cap stops a model before the request that
could cross it (with --approve: the user allows more and the migration goes on)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from agent.llm import scripted
from agent.llm.cost import COMPLETION_TOKENS_UNDER_CAP

ROOT = Path(__file__).resolve().parents[2]

# as in test_llm_graph.py: the CPU tensor hidden in a dict is left for the model
PROG = '''import torch

device = torch.device("cuda")
table = {"w": torch.full((3,), 2.0)}


def main():
    x = torch.ones(3, device=device)
    for step in range(2):
        print(f"step {step} loss {(x * table['w']).sum().item() + step:.4f}")


main()
'''
FIX = {"path": "prog.py", "search": 'torch.full((3,), 2.0)}', "replace": 'torch.full((3,), 2.0, device=device)}'}


def _repo(tmp_path: Path) -> Path:
    repo = tmp_path / "repo"
    repo.mkdir()
    (repo / "prog.py").write_text(PROG)
    return repo


def _env(tmp_path: Path, prices: str | None = None) -> dict[str, str]:
    env = {**os.environ, "FERRY_LLM_API_KEY": "sk-test-key-do-not-log-0001"}
    env.pop("FERRY_LLM_BASE_URL", None)
    env.pop("FERRY_LLM_MAX_COST_USD", None)
    if prices is not None:
        table = tmp_path / "prices.toml"
        table.write_text(prices)
        env["FERRY_LLM_PRICES"] = str(table)
    return env


def _ferry(args: list[str], env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "agent.cli", *args], cwd=ROOT, capture_output=True, text=True,
                          timeout=600, env=env)


def _migrate(repo: Path, tmp_path: Path, base_url: str, *extra: str) -> list[str]:
    return ["migrate", str(repo), "--run", "python prog.py", "--llm", "--llm-base-url", base_url, "--llm-model",
            "scripted", "--json", "--state-dir", str(tmp_path / "state"), "--out", str(tmp_path / "out"), *extra]


@pytest.mark.slow
def test_a_recorded_trajectory_replays_to_the_same_patch_and_status(tmp_path):
    repo = _repo(tmp_path)
    script = [
        scripted.reply(scripted.tool_call("read_file", {"path": "prog.py", "start": 1, "end": 12})),
        scripted.reply(scripted.tool_call("apply_edit", FIX, "c2")),
        scripted.reply(scripted.tool_call("finish", {"summary": "the table tensor on the device"}, "c3")),
    ]
    env = _env(tmp_path)
    with scripted.ScriptedLLM(script) as server:
        res = _ferry(_migrate(repo, tmp_path, server.base_url, "--id", "rec1", "--llm-max-cost", "5"), env)
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    result = json.loads(res.stdout)
    assert result["status"] == "migrated"
    out = tmp_path / "out"
    traj_file = out / "trajectory.jsonl"
    # next to result.json, in --out and in the migration's own out artifacts
    assert traj_file.is_file() and (tmp_path / "state" / "artifacts" / "rec1" / "out" / "trajectory.jsonl").is_file()
    text = traj_file.read_text()
    assert "sk-test-key-do-not-log-0001" not in text
    lines = [json.loads(line) for line in text.splitlines()]
    assert lines[0]["kind"] == "header" and lines[0]["model"] == "scripted" and lines[0]["migration_id"] == "rec1"
    kinds = [e["kind"] for e in lines[1:]]
    # the plan's request (refused: no plan scripted), then the fixer's three with their tool calls
    assert kinds == ["request", "failure", "request", "reply", "tool", "request", "reply", "tool", "request",
                     "reply", "tool"]
    tools = [e for e in lines if e["kind"] == "tool"]
    assert [t["name"] for t in tools] == ["read_file", "apply_edit", "finish"]
    assert "import torch" in tools[0]["observation"]
    fixer_requests = [e for e in lines if e["kind"] == "request" and e["node"] == "llm_fix"]
    assert fixer_requests[0]["messages"] == server.requests[0]["body"]["messages"]  # as sent

    # ferry trajectory: readable, and --json checked
    shown = _ferry(["trajectory", "rec1", "--state-dir", str(tmp_path / "state")], env)
    assert shown.returncode == 0, shown.stderr
    assert "reply 2" in shown.stdout and "apply_edit" in shown.stdout and "tool call c2" in shown.stdout
    as_json = json.loads(_ferry(["trajectory", str(traj_file), "--json"], env).stdout)
    assert as_json["header"]["model"] == "scripted" and len(as_json["events"]) == 11

    # ferry replay: offline, the recorded replies served in order, the same patch byte for byte
    replayed = _ferry(["replay", str(out), "--json", "--out", str(tmp_path / "replay-out")], env)
    assert replayed.returncode == 0, replayed.stdout[-3000:] + replayed.stderr[-3000:]
    verdict = json.loads(replayed.stdout)
    assert verdict["same_patch"] and verdict["same_status"] and verdict["status"] == "migrated"
    assert verdict["requests_served"] == verdict["requests_recorded"] == 4 and verdict["divergence"] is None
    assert (tmp_path / "replay-out" / "ferry.patch").read_bytes() == (out / "ferry.patch").read_bytes()

    # a trajectory whose request no longer matches what Ferry sends: the replay names where it diverged
    first_fix = next(i for i, e in enumerate(lines) if e["kind"] == "request" and e["node"] == "llm_fix")
    lines[first_fix]["messages"][1]["content"] = "a prompt Ferry never sent"
    (out / "trajectory.jsonl").write_text("".join(json.dumps(e) + "\n" for e in lines))
    diverged = _ferry(["replay", str(out), "--json", "--out", str(tmp_path / "replay-2")], env)
    assert diverged.returncode == 1
    bad = json.loads(diverged.stdout)
    why = bad["divergence"]
    assert why.startswith("the replay diverged at request 2") and "messages[1].content" in why
    assert bad["status"] == "failed_llm" and not bad["same_patch"]


# $100 per million completion tokens, prompts free: a request's worst case is 4096 completion tokens
# ($0.4096), each scripted reply spends 20 ($0.002)
PRICEY = '[models."scripted"]\ninput_per_mtok = 0.0\noutput_per_mtok = 100.0\n'
WORST = COMPLETION_TOKENS_UNDER_CAP * 100 / 1e6
CAP = round(WORST + 2 * 0.002 - 0.001, 6)  # the plan's request (no tokens) and two fixer requests fit, not three


@pytest.mark.slow
def test_the_cost_cap_stops_the_model_before_the_request_that_would_cross_it(tmp_path):
    repo = _repo(tmp_path)
    script = [scripted.reply(scripted.tool_call("read_file", {"path": "prog.py", "start": 1, "end": 12}, f"c{i}"))
              for i in range(4)]
    with scripted.ScriptedLLM(script) as server:
        res = _ferry(_migrate(repo, tmp_path, server.base_url, "--llm-max-cost", str(CAP)),
                     _env(tmp_path, PRICEY))
    assert res.stdout, res.stderr[-3000:]
    result = json.loads(res.stdout)
    assert len(server.requests) == 2 and len(server.plan_requests) == 1  # exactly N, not N+1
    assert result["status"] == "failed_budget", result["summary"]
    assert "cost cap reached" in result["summary"] and "$0.0040 spent" in result["summary"]
    assert result["llm"]["cost_usd"] == pytest.approx(0.004)
    stop = json.loads((tmp_path / "out" / "trajectory.jsonl").read_text().splitlines()[-1])
    assert stop["kind"] == "cost_cap" and stop["spent_usd"] == pytest.approx(0.004) and stop["cap_usd"] == CAP


@pytest.mark.slow
def test_with_approve_the_user_allows_more_and_the_migration_goes_on(tmp_path):
    repo = _repo(tmp_path)
    script = [
        scripted.reply(scripted.tool_call("read_file", {"path": "prog.py", "start": 1, "end": 12}, "c1")),
        scripted.reply(scripted.tool_call("read_file", {"path": "prog.py", "start": 1, "end": 4}, "c2")),
        # after the approval the fix starts again
        scripted.reply(scripted.tool_call("apply_edit", FIX, "c3")),
        scripted.reply(scripted.tool_call("finish", {"summary": "the table tensor on the device"}, "c4")),
    ]
    env = _env(tmp_path, PRICEY)
    with scripted.ScriptedLLM(script) as server:
        res = _ferry(_migrate(repo, tmp_path, server.base_url, "--llm-max-cost", str(CAP), "--approve", "--id",
                              "cap1"), env)
        assert res.returncode == 1, res.stderr[-3000:]
        waiting = json.loads(res.stdout)
        assert waiting["status"] == "awaiting_approval" and len(server.requests) == 2
        question = waiting["interrupts"][0]
        assert question["type"] == "approve_cost" and question["spent_usd"] == pytest.approx(0.004)
        assert question["cap_usd"] == CAP
        resumed = _ferry(["resume", "cap1", "--state-dir", str(tmp_path / "state"), "--allow-cost", "1",
                          "--json"], env)
        # the edit's own approval comes next (--approve asks for every model edit)
        assert resumed.returncode == 1, resumed.stderr[-3000:]
        assert json.loads(resumed.stdout)["interrupts"][0]["type"] == "approve_edit"
        done = _ferry(["resume", "cap1", "--state-dir", str(tmp_path / "state"), "--approve", "--json"], env)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    result = json.loads(done.stdout)
    assert result["status"] == "migrated" and len(server.requests) == 4
    assert "torch.full((3,), 2.0, device=device)" in (tmp_path / "out" / "ferry.patch").read_text()
    steps = [s["summary"] for s in result["steps"] if s["node"] == "approve_cost"]
    assert steps and steps[-1].startswith("allowed $1.0000 more")


@pytest.mark.slow
def test_approve_and_refuse_more_ends_failed_budget_with_what_was_spent(tmp_path):
    repo = _repo(tmp_path)
    script = [scripted.reply(scripted.tool_call("read_file", {"path": "prog.py"}, f"c{i}")) for i in range(3)]
    env = _env(tmp_path, PRICEY)
    with scripted.ScriptedLLM(script) as server:
        res = _ferry(_migrate(repo, tmp_path, server.base_url, "--llm-max-cost", str(CAP), "--approve", "--id",
                              "cap2"), env)
        assert json.loads(res.stdout)["interrupts"][0]["type"] == "approve_cost"
        done = _ferry(["resume", "cap2", "--state-dir", str(tmp_path / "state"), "--reject", "--json"], env)
    result = json.loads(done.stdout)
    assert result["status"] == "failed_budget" and "$0.0040 spent" in result["summary"]
    assert len(server.requests) == 2


def test_an_unpriced_model_without_a_cap_does_not_start(tmp_path):
    repo = _repo(tmp_path)
    env = _env(tmp_path)
    args = ["migrate", str(repo), "--run", "python prog.py", "--llm", "--llm-base-url", "http://127.0.0.1:9/v1",
            "--llm-model", "no-such-priced-model", "--state-dir", str(tmp_path / "state")]
    res = _ferry(args, env)
    assert res.returncode == 2
    assert "'no-such-priced-model' has no price" in res.stderr and "--llm-max-cost none" in res.stderr
    # a cap in money cannot be held without a price either
    capped = _ferry([*args, "--llm-max-cost", "3"], env)
    assert capped.returncode == 2 and "cannot be held to a cost cap" in capped.stderr
    bad = _ferry([*args, "--llm-max-cost", "cheap"], env)
    assert bad.returncode == 2 and "--llm-max-cost" in bad.stderr


def test_none_says_no_cap_and_the_variable_is_read(tmp_path, monkeypatch):
    from agent.cli import build_parser
    from agent.cli.migrate_cmd import build_options

    repo = _repo(tmp_path)
    monkeypatch.delenv("FERRY_LLM_MAX_COST_USD", raising=False)
    base = ["migrate", str(repo), "--run", "python prog.py", "--llm", "--llm-base-url", "http://127.0.0.1:9/v1",
            "--llm-model", "no-such-priced-model", "--state-dir", str(tmp_path / "state")]
    opts = build_options(build_parser().parse_args([*base, "--llm-max-cost", "none"]))
    assert opts.llm_max_cost == "none"
    monkeypatch.setenv("FERRY_LLM_MAX_COST_USD", "none")
    assert build_options(build_parser().parse_args(base)).llm_max_cost == "none"
    monkeypatch.setenv("FERRY_LLM_MAX_COST_USD", "2.5")
    priced = [*base[:-4], "--llm-model", "gpt-4o", "--state-dir", str(tmp_path / "state")]
    assert build_options(build_parser().parse_args(priced)).llm_max_cost == 2.5
