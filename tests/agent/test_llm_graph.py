"""The whole graph with --llm: no offline rule applies, the model's edit is applied and re-verified."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from agent.llm import scripted

ROOT = Path(__file__).resolve().parents[2]

# The CPU tensor hidden in a dict defeats the offline mixed-device rule (no factory on a name
# used at the failing line), so the graph asks the model.
PROG = '''import torch

device = torch.device("cuda")
table = {"w": torch.full((3,), 2.0)}


def main():
    x = torch.ones(3, device=device)
    for step in range(2):
        print(f"step {step} loss {(x * table['w']).sum().item() + step:.4f}")


main()
'''


@pytest.mark.slow
def test_model_fixes_what_no_rule_can(tmp_path):
    repo = tmp_path / "repo"
    repo.mkdir()
    (repo / "prog.py").write_text(PROG)
    script = [
        scripted.reply(scripted.tool_call("read_file", {"path": "prog.py", "start": 1, "end": 12})),
        scripted.reply(scripted.tool_call("apply_edit", {"path": "prog.py", "search": 'torch.full((3,), 2.0)}',
                                                         "replace": 'torch.full((3,), 2.0, device=device)}'}, "c2")),
        scripted.reply(scripted.tool_call("finish", {"summary": "create the table tensor on the device"}, "c3")),
    ]
    # the model's plan: one file the scan did not find and one unknown finding id, both dropped
    plan = {"files": ["ghost.py", "prog.py"], "findings": ["F42", "F1"], "verify": ["the loss of every step matches"],
            "rationale": "one file; its device first"}
    plans = [scripted.reply(scripted.tool_call("submit_plan", plan, "p1"))]
    env = {**os.environ, "FERRY_LLM_API_KEY": "k"}
    env.pop("FERRY_LLM_BASE_URL", None)
    with scripted.ScriptedLLM(script, plans=plans) as server:
        res = subprocess.run(
            [sys.executable, "-m", "agent.cli", "migrate", str(repo), "--run", "python prog.py", "--llm",
             "--llm-base-url", server.base_url, "--llm-model", "scripted", "--json",
             "--state-dir", str(tmp_path / "state"), "--out", str(tmp_path / "out")],
            cwd=ROOT, capture_output=True, text=True, timeout=600, env=env)
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    result = json.loads(res.stdout)
    assert result["status"] == "migrated"
    llm = result["llm"]
    # three fixer calls and the plan's
    assert {k: llm[k] for k in ("calls", "prompt_tokens", "completion_tokens", "total_tokens")} == {
        "calls": 4, "prompt_tokens": 400, "completion_tokens": 80, "total_tokens": 480}
    # priced from agent/llm/prices.toml (scripted: $1 / $2 per million tokens)
    assert llm["model"] == "scripted" and llm["cost_usd"] == pytest.approx(560e-6) and llm["failures"] == {}
    llm_edits = [e for e in result["edits"] if e["kind"] == "llm"]
    assert len(llm_edits) == 1 and "create the table tensor on the device" in llm_edits[0]["reason"]
    # every edit says who made it: the model's are `model`, the codemods' their rules
    assert llm_edits[0]["by"] == "model"
    assert [e["by"] for e in result["edits"] if e["kind"] == "codemod"] == ["rule FRY001"]
    report = (tmp_path / "out" / "report.md").read_text()
    assert "| fix-1 | model | `prog.py:10` | `prog.py` |" in report and "### fix-1: llm (llm, by model)" in report
    # the model's plan, validated against the scan and recorded beside the offline one
    assert result["plan_source"] == "model"
    model_plan = result["model_plan"]
    assert model_plan["files"] == ["prog.py"] and model_plan["findings"] == ["F1"] and model_plan["error"] is None
    assert model_plan["warnings"] == ["dropped file 'ghost.py': not a file the scan found",
                                      "dropped finding 'F42': not a finding id of the scan"]
    assert "### Plan (offline)" in report and "### Plan (model)" in report
    assert "- files in order: `prog.py`" in report and "  - the loss of every step matches" in report
    assert "- warning: dropped file 'ghost.py': not a file the scan found" in report
    assert len(server.plan_requests) == 1
    # re-verified: a target run after the model's edit passed
    targets = [r for r in result["run_log"] if r["kind"] == "target"]
    assert [r["status"] for r in targets] == ["failed", "ok"]
    first_prompt = server.requests[0]["body"]["messages"][1]["content"]
    assert "mixed_devices" in first_prompt and "prog.py" in first_prompt
    assert "torch.full((3,), 2.0, device=device)" in (tmp_path / "out" / "ferry.patch").read_text()


# The same failure, and a torch.cuda.synchronize() after the loop (FRY013's site, prog.py:11) that the run
# never reaches before the failure: the user skips FRY013, the model's edit fixes the table and rewrites it too.
SYNC_PROG = PROG.replace("\n\n\nmain()", "\n    torch.cuda.synchronize()\n\n\nmain()")


@pytest.mark.slow
def test_a_model_edit_that_makes_a_skipped_rules_change_is_not_made(tmp_path):
    """Issue 27: after `skip FRY013` the model's edit that re-does FRY013's change (and fixes the failure
    beside it) is refused as a whole; the migration stops needs_human naming the rule and the site, and the
    patch and summary agree: nothing of that edit is in the patch, no model edit is recorded."""
    assert SYNC_PROG.splitlines()[10] == "    torch.cuda.synchronize()"
    repo = tmp_path / "repo"
    repo.mkdir()
    (repo / "prog.py").write_text(SYNC_PROG)
    script = [
        scripted.reply(scripted.tool_call("apply_edit", {"path": "prog.py", "search": 'torch.full((3,), 2.0)}',
                                                         "replace": 'torch.full((3,), 2.0, device=device)}'}, "c1")),
        scripted.reply(scripted.tool_call("apply_edit", {"path": "prog.py", "search": "torch.cuda.synchronize()",
                                                         "replace": "torch.accelerator.synchronize()"}, "c2")),
        scripted.reply(scripted.tool_call("finish", {"summary": "table on the device; a device-generic sync"}, "c3")),
    ]
    env = {**os.environ, "FERRY_LLM_API_KEY": "k"}
    env.pop("FERRY_LLM_BASE_URL", None)
    with scripted.ScriptedLLM(script) as server:
        res = subprocess.run(
            [sys.executable, "-m", "agent.cli", "migrate", str(repo), "--run", "python prog.py", "--llm",
             "--skip-rule", "FRY013", "--llm-base-url", server.base_url, "--llm-model", "scripted", "--json",
             "--state-dir", str(tmp_path / "state"), "--out", str(tmp_path / "out")],
            cwd=ROOT, capture_output=True, text=True, timeout=600, env=env)
    assert res.stdout, res.stderr[-3000:]
    result = json.loads(res.stdout)
    assert len(server.requests) == 3 and not server.script  # the model was asked and made its edit
    assert result["status"] == "needs_human", result["summary"]
    summary = result["summary"]
    assert "FRY013 at prog.py:11" in summary and "asked to skip" in summary
    # the edit is not made: no model edit, nothing of it (nor FRY013's change) in the patch
    assert [e for e in result["edits"] if e["kind"] == "llm" or e["by"] == "model"] == []
    assert [e["by"] for e in result["edits"]] == ["rule FRY001"]
    patch = (tmp_path / "out" / "ferry.patch").read_text()
    assert "synchronize" not in patch and "2.0, device=device" not in patch
    steps = [s for s in result["steps"] if s["node"] == "llm_fix"]
    assert steps and steps[-1]["summary"].startswith("model's edit not made: ")
