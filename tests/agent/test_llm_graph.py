"""The whole graph with --llm: no offline rule applies, the model's edit is applied and re-verified."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
_spec = importlib.util.spec_from_file_location("scripted_llm_g", Path(__file__).with_name("scripted_llm.py"))
scripted = importlib.util.module_from_spec(_spec)
sys.modules["scripted_llm_g"] = scripted
_spec.loader.exec_module(scripted)  # type: ignore[union-attr]

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
    env = {**os.environ, "FERRY_LLM_API_KEY": "k"}
    env.pop("FERRY_LLM_BASE_URL", None)
    with scripted.ScriptedLLM(script) as server:
        res = subprocess.run(
            [sys.executable, "-m", "agent.cli", "migrate", str(repo), "--run", "python prog.py", "--llm",
             "--llm-base-url", server.base_url, "--llm-model", "scripted", "--json",
             "--state-dir", str(tmp_path / "state"), "--out", str(tmp_path / "out")],
            cwd=ROOT, capture_output=True, text=True, timeout=600, env=env)
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    result = json.loads(res.stdout)
    assert result["status"] == "migrated"
    llm = result["llm"]
    assert {k: llm[k] for k in ("calls", "prompt_tokens", "completion_tokens", "total_tokens")} == {
        "calls": 3, "prompt_tokens": 300, "completion_tokens": 60, "total_tokens": 360}
    # priced from agent/llm/prices.toml (scripted: $1 / $2 per million tokens)
    assert llm["model"] == "scripted" and llm["cost_usd"] == pytest.approx(420e-6) and llm["failures"] == {}
    llm_edits = [e for e in result["edits"] if e["kind"] == "llm"]
    assert len(llm_edits) == 1 and "create the table tensor on the device" in llm_edits[0]["reason"]
    # re-verified: a target run after the model's edit passed
    targets = [r for r in result["run_log"] if r["kind"] == "target"]
    assert [r["status"] for r in targets] == ["failed", "ok"]
    first_prompt = server.requests[0]["body"]["messages"][1]["content"]
    assert "mixed_devices" in first_prompt and "prog.py" in first_prompt
    assert "torch.full((3,), 2.0, device=device)" in (tmp_path / "out" / "ferry.patch").read_text()
