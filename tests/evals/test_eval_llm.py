"""``ferry eval --policy llm`` against an OpenAI-compatible server (the scripted one on loopback): the
harness passes the model's settings to the case's migration, the model is asked, and the case's LLM
calls and estimated cost come back in results.jsonl and the leaderboard."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from agent.llm import scripted

ROOT = Path(__file__).resolve().parents[2]

# The CPU tensor hidden in a dict defeats the offline rules (tests/agent/test_llm_graph.py): only the model fixes it.
PROG = '''import torch

device = torch.device("cuda")
table = {"w": torch.full((3,), 2.0)}


def main():
    x = torch.ones(3, device=device)
    loss = (x * table["w"]).sum().item()
    print(f"loss {loss:.4f}")
    return loss


if __name__ == "__main__":
    main()
'''

GRADING = '''import prog


def test_the_program_runs_on_the_accelerator():
    assert prog.main() == 6.0
'''

CASE = '''name = "hidden_table"
description = "A CPU tensor in a dict, used with device tensors: no offline rule applies."
difficulty = "easy"
idiom_groups = ["placement"]
run = "python prog.py"
expected_status = "migrated"
timeout_s = 400

[grading]
fail_to_pass = ["ferry_grading/test_prog.py::test_the_program_runs_on_the_accelerator"]
'''


@pytest.mark.slow
def test_eval_policy_llm_asks_the_configured_server_and_reports_calls_and_cost(tmp_path):
    case = tmp_path / "suite" / "hidden_table"
    (case / "repo").mkdir(parents=True)
    (case / "grading").mkdir()
    (case / "ferry-eval.toml").write_text(CASE)
    (case / "repo" / "prog.py").write_text(PROG)
    (case / "grading" / "test_prog.py").write_text(GRADING)
    script = [
        scripted.reply(scripted.tool_call("read_file", {"path": "prog.py", "start": 1, "end": 12})),
        scripted.reply(scripted.tool_call("apply_edit", {"path": "prog.py", "search": "torch.full((3,), 2.0)}",
                                                         "replace": "torch.full((3,), 2.0, device=device)}"}, "c2")),
        scripted.reply(scripted.tool_call("finish", {"summary": "create the table tensor on the device"}, "c3")),
    ]
    env = {**os.environ, "FERRY_LLM_API_KEY": "k"}
    for name in ("FERRY_LLM_BASE_URL", "FERRY_LLM_MODEL", "FERRY_LLM_PRICES"):
        env.pop(name, None)
    out = tmp_path / "run"
    with scripted.ScriptedLLM(script) as server:
        res = subprocess.run(
            [sys.executable, "-m", "agent.cli", "eval", str(tmp_path / "suite"), "--policy", "llm",
             "--llm-base-url", server.base_url, "--llm-model", "scripted", "--llm-timeout", "20",
             "--llm-max-calls", "10", "--out", str(out), "--json"],
            cwd=ROOT, capture_output=True, text=True, timeout=900, env=env)
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    result = json.loads(res.stdout)["results"][0]
    # the model's fix made the case migrate (its grading by hidden tests is tests/evals/test_harness.py's subject)
    assert result["status"] == "migrated", result["reason"]
    # the fixer's three and the plan's (no plan scripted: the server refused it, no tokens; the offline plan ran)
    assert result["llm_calls"] == 4 and len(server.requests) == 3 and len(server.plan_requests) == 1
    assert (result["prompt_tokens"], result["completion_tokens"]) == (300, 60)
    assert result["model"] == "scripted" and result["cost_usd"] == pytest.approx(420e-6)  # agent/llm/prices.toml
    assert server.requests[0]["body"]["model"] == "scripted" and server.requests[0]["auth"] == "Bearer k"
    # the settings reached the case's migration: its own result.json names the model and its cost
    record = json.loads((Path(result["out_dir"]) / "result.json").read_text())
    assert record["llm"]["model"] == "scripted" and record["llm"]["cost_usd"] == pytest.approx(420e-6)
    board = (out / "leaderboard.md").read_text()
    assert "cost $0.0004" in board and "| $0.0004 |" in board
    # the case's trajectory is kept in its folder, and --compare names the first tool call that differs
    kept = Path(result["out_dir"]) / "trajectory.jsonl"
    assert [e["name"] for e in map(json.loads, kept.read_text().splitlines()) if e["kind"] == "tool"] == [
        "read_file", "apply_edit", "finish"]
    other = tmp_path / "run-b"
    shutil.copytree(out, other)
    (other / "results.jsonl").write_text((out / "results.jsonl").read_text().replace(str(out), str(other)))
    moved = Path(str(result["out_dir"]).replace(str(out), str(other))) / "trajectory.jsonl"
    moved.write_text(moved.read_text().replace('"name":"apply_edit"', '"name":"apply_diff"'))
    cmp = subprocess.run([sys.executable, "-m", "agent.cli", "eval", "--compare", str(out), str(other), "--json"],
                         cwd=ROOT, capture_output=True, text=True, timeout=120, env=env)
    assert cmp.returncode == 0, cmp.stdout[-2000:] + cmp.stderr[-2000:]
    calls = json.loads(cmp.stdout)["tool_calls"]
    assert [(c["case"], c["first_difference"], c["calls_before"]) for c in calls] == [(result["name"], 1, 3)]
    assert calls[0]["before"].startswith("apply_edit(") and calls[0]["after"].startswith("apply_diff(")
