"""The graph with --llm after a verified migration whose profile has findings worth a change: the
model's one profile round, kept when its change passes the whole verification, reverted when it
breaks parity; and a plan the server failed (HTTP 500 through every retry) that leaves the offline
plan running."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from agent.llm import scripted

ROOT = Path(__file__).resolve().parents[2]

# Migrated by the codemods alone; its profile: `.item()` syncs 12 times at line 11 (a high finding).
PROG = '''import torch

device = torch.device("cuda")


def main():
    w = torch.full((4,), 0.5, device=device)
    total = 0.0
    for step in range(12):
        x = torch.ones(4, device=device) * step
        total += (x * w).sum().item()
    print(f"final loss {total:.4f}")


main()
'''
SYNC = "        total += (x * w).sum().item()"


def _migrate(tmp_path: Path, script: list, plans: list | None = None) -> tuple[dict, str, str, object]:
    repo = tmp_path / "repo"
    repo.mkdir()
    (repo / "prog.py").write_text(PROG)
    env = {**os.environ, "FERRY_LLM_API_KEY": "k"}
    env.pop("FERRY_LLM_BASE_URL", None)
    with scripted.ScriptedLLM(script, plans=plans) as server:
        res = subprocess.run(
            [sys.executable, "-m", "agent.cli", "migrate", str(repo), "--run", "python prog.py", "--llm",
             "--llm-base-url", server.base_url, "--llm-model", "scripted", "--json",
             "--state-dir", str(tmp_path / "state"), "--out", str(tmp_path / "out")],
            cwd=ROOT, capture_output=True, text=True, timeout=600, env=env)
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    out = tmp_path / "out"
    return json.loads(res.stdout), (out / "report.md").read_text(), (out / "ferry.patch").read_text(), server


def _edit(search: str, replace: str, call_id: str) -> dict:
    return scripted.reply(scripted.tool_call("apply_edit", {"path": "prog.py", "search": search, "replace": replace},
                                             call_id))


@pytest.mark.slow
def test_a_failed_plan_runs_the_offline_one_and_a_verified_profile_change_is_kept(tmp_path):
    script = [_edit(SYNC, "        total += (x * w).sum()", "c1"),
              _edit('    print(f"final loss {total:.4f}")', '    print(f"final loss {float(total):.4f}")', "c2"),
              scripted.reply(scripted.tool_call("finish", {"summary": "keep the running total on the device"}, "c3"))]
    result, report, patch, server = _migrate(tmp_path, script, plans=[scripted.error(500)] * 5)
    assert result["status"] == "migrated", result["summary"]
    # the plan: five HTTP 500s (the first try and 4 retries), recorded; the offline plan ran
    assert len(server.plan_requests) == 5 and result["plan_source"] == "offline"
    assert result["model_plan"]["error"].startswith(
        "failed_llm: LLM server_error: the model server kept failing after 4 retries")
    assert "The model's plan failed, so the offline plan ran: failed_llm:" in report
    assert result["llm"]["calls"] == 5 + 3
    # the profile round: the model saw the finding and the code around it
    prompt = server.requests[0]["body"]["messages"][1]["content"]
    assert "Phase: profile" in prompt and "prog.py:11  device-to-host sync: item (12x)" in prompt
    assert ">11:         total += (x * w).sum().item()" in prompt
    change = result["profile_change"]
    assert change["outcome"] == "kept" and change["files"] == ["prog.py"]
    assert "findings worth a change: 1 before, 0 after" in change["reason"]
    assert [(e["kind"], e["by"]) for e in result["edits"]] == [("codemod", "rule FRY001"), ("llm", "model")]
    assert "+        total += (x * w).sum()\n" in patch and "+    print(f\"final loss {float(total):.4f}\")" in patch
    assert result["parity"]["passed"] is True and result["cpu_check"]["verdict"] == "pass"
    assert "- outcome: **kept: it passed the run, parity, the tests, the CPU check and the profile**" in report
    # verified the whole way: a second probed, profiled target run after the model's edit
    assert [r["kind"] for r in result["run_log"]].count("target") == 2


@pytest.mark.slow
def test_a_profile_change_that_breaks_parity_is_reverted(tmp_path):
    script = [_edit(SYNC, "        total += 2 * (x * w).sum().item()", "c1"),
              scripted.reply(scripted.tool_call("finish", {"summary": "fold the sum"}, "c2"))]
    result, report, patch, _server = _migrate(tmp_path, script)
    assert result["status"] == "migrated", result["summary"]
    # no plan scripted: the server refused it (HTTP 400), one call, recorded; the migration went on
    assert result["plan_source"] == "offline" and "HTTP 400" in result["model_plan"]["error"]
    assert result["llm"]["calls"] == 1 + 2
    change = result["profile_change"]
    assert change["outcome"] == "rejected" and change["reason"].startswith("parity failed")
    assert [(e["kind"], e["by"]) for e in result["edits"]] == [
        ("codemod", "rule FRY001"), ("llm", "model"), ("revert", "Ferry (revert)")]
    assert "2 * (x * w)" not in patch and "total += (x * w).sum().item()" in (tmp_path / "repo" / "prog.py").read_text()
    # the report describes the code it ships: the verified state's parity, not the rejected change's
    assert result["parity"]["passed"] is True and result["cpu_check"]["verdict"] == "pass"
    assert "rejected, and reverted to the last verified state" in report and "- why: parity failed" in report
    assert "the model's profile change was rejected: parity failed" in report  # the revert edit's reason
