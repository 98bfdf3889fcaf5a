"""The graph with --llm on a parity failure no offline rule explains.

The fixture (tests/agent/fixtures/device_branch) picks a normalisation epsilon by device:
``1e-1 if x.is_cuda else 1e-6``. The reference run (original code, CUDA redirected to CPU) sees
CPU tensors and takes 1e-6; the catalogue codemod turns ``x.is_cuda`` into
``x.device.type == device.type``, true on tpx, so the migrated run takes 1e-1. The program runs
on tpx and parity fails at ``Net.norm``, attributed to the computation: the offline policy's only
parity rule (matmul precision) does not apply, so the model is asked, through the scripted
OpenAI-compatible server on loopback and the real openai client.
"""

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
FIXTURE = Path(__file__).with_name("fixtures") / "device_branch"

MIGRATED_LINE = "eps = 1e-1 if x.device.type == device.type else 1e-6"
WRONG_LINE = "eps = 1e-2 if x.device.type == device.type else 1e-6"
FIXED_LINE = 'eps = 1e-1 if x.device.type == "cuda" else 1e-6'


def _migrate(tmp_path: Path, server, *extra: str) -> tuple[dict, str]:
    repo = tmp_path / "repo"
    shutil.copytree(FIXTURE, repo, ignore=shutil.ignore_patterns("__pycache__"))
    env = {**os.environ, "FERRY_LLM_API_KEY": "k"}
    env.pop("FERRY_LLM_BASE_URL", None)
    res = subprocess.run(
        [sys.executable, "-m", "agent.cli", "migrate", str(repo), "--run", "python train.py", "--llm",
         "--llm-base-url", server.base_url, "--llm-model", "scripted", "--json", *extra,
         "--state-dir", str(tmp_path / "state"), "--out", str(tmp_path / "out")],
        cwd=ROOT, capture_output=True, text=True, timeout=900, env=env)
    assert res.returncode in (0, 1), res.stdout[-3000:] + res.stderr[-3000:]
    assert (repo / "model.py").read_text() == (FIXTURE / "model.py").read_text()  # the user's repo is untouched
    return json.loads(res.stdout), res.stderr


def _first_prompt(request: dict) -> str:
    return request["body"]["messages"][1]["content"]


def _wrong_round(first_id: str) -> list[dict]:
    """A model round whose edit does not fix parity (a smaller epsilon, still on the tpx path)."""
    return [
        scripted.reply(scripted.tool_call("read_file", {"path": "model.py", "start": 1, "end": 30}, f"{first_id}a")),
        scripted.reply(scripted.tool_call("apply_edit", {"path": "model.py", "search": MIGRATED_LINE,
                                                         "replace": WRONG_LINE}, f"{first_id}b")),
        scripted.reply(scripted.tool_call("finish", {"summary": "use a smaller epsilon"}, f"{first_id}c")),
    ]


def _assert_parity_evidence(prompt: str) -> None:
    for expected in (
        "probe key Net.norm#0", "class ScaledNorm", "Likely cause: ",  # where, and the attribution
        "metrics: max_abs", "tolerances (float32)", "pass limit 0.01%",  # metrics vs tolerance
        "definition of ScaledNorm", "self.norm = ScaledNorm(dim)", "return self.norm(self.act(x))",  # source
        "\n-        eps = 1e-1 if x.is_cuda else 1e-6",  # what the migration changed there
        "Offline rules already applied: ",
    ):
        assert expected in prompt, f"{expected!r} missing from the model's prompt:\n{prompt}"


@pytest.mark.slow
def test_model_fixes_a_parity_failure_no_rule_explains(tmp_path):
    fix_round = [
        scripted.reply(scripted.tool_call("apply_edit", {"path": "model.py", "search": WRONG_LINE,
                                                         "replace": FIXED_LINE}, "r2a")),
        scripted.reply(scripted.tool_call("check_parity", {}, "r2b")),
        scripted.reply(scripted.tool_call("finish", {"summary": "the larger epsilon is for CUDA kernels only"}, "r2c")),
    ]
    with scripted.ScriptedLLM(_wrong_round("r1") + fix_round) as server:
        result, stderr = _migrate(tmp_path, server)
    assert result["status"] == "migrated", (result["summary"], stderr[-3000:])
    assert result["parity"]["passed"] is True
    # 6 fixer calls and the plan's (no plan scripted: the server refused it, no tokens)
    assert {k: result["llm"][k] for k in ("calls", "prompt_tokens", "completion_tokens", "total_tokens")} == {
        "calls": 7, "prompt_tokens": 600, "completion_tokens": 120, "total_tokens": 720}
    assert len(server.plan_requests) == 1 and result["plan_source"] == "offline"
    fixes = [(e["kind"], e["rule"]) for e in result["edits"] if e["kind"] != "codemod"]
    # the divergence is attributed to the computation, not to matmul precision: no offline rule fires
    assert fixes == [("llm", "llm"), ("llm", "llm")]
    assert all(e["site"] == "parity:Net.norm#0" for e in result["edits"] if e["kind"] == "llm")
    # every edit re-verified by a probed target run: codemods, then the model's two rounds
    assert [r["status"] for r in result["run_log"] if r["kind"] == "target"] == ["ok"] * 3
    # round one: the evidence; round two: the same evidence plus the model's own failed edit
    first, second = _first_prompt(server.requests[0]), _first_prompt(server.requests[3])
    _assert_parity_evidence(first)
    _assert_parity_evidence(second)
    assert "Likely cause: computation" in first
    assert "Offline rules already applied: none" in first
    assert "use a smaller epsilon" not in first
    assert "llm at parity:Net.norm#0 (llm): model: use a smaller epsilon" in second
    assert WRONG_LINE in second  # the source shown is the current one
    # the check_parity tool ran the edit and reported a pass back to the model
    tool_reply = server.requests[5]["body"]["messages"][-1]
    assert tool_reply["role"] == "tool" and json.loads(tool_reply["content"])["passed"] is True
    patch = (tmp_path / "out" / "ferry.patch").read_text()
    assert f"+        {FIXED_LINE}" in patch


@pytest.mark.slow
@pytest.mark.parametrize("budget", ["iterations", "llm_calls"])
def test_model_edit_that_does_not_fix_parity_ends_in_the_budget_status(tmp_path, budget):
    # the script holds more rounds than the budget allows: what is left unused proves it stopped
    script = _wrong_round("r1") + [
        scripted.reply(scripted.tool_call("apply_edit", {"path": "model.py", "search": WRONG_LINE,
                                                         "replace": WRONG_LINE.replace("1e-2", "1e-3")}, "r2a")),
        scripted.reply(scripted.tool_call("finish", {"summary": "smaller still"}, "r2b")),
    ] * 3
    # the plan's call (refused: no plan scripted) counts against the call budget as well
    extra = ["--max-iterations", "2"] if budget == "iterations" else ["--llm-max-calls", "5"]
    with scripted.ScriptedLLM(script) as server:
        result, stderr = _migrate(tmp_path, server, *extra)
    assert result["status"] == "failed_budget", (result["summary"], stderr[-3000:])
    if budget == "iterations":
        # the model's two rounds (fix rounds 1 and 2) leave parity failing: it is not asked a third time
        assert "iteration budget exhausted: 2 fix rounds" in result["summary"]
        assert "Net.norm#0" in result["summary"]
        assert len(server.requests) == 5 and result["llm"]["calls"] == 5 + 1
        assert [r["status"] for r in result["run_log"] if r["kind"] == "target"] == ["ok"] * 3
        assert [e["kind"] for e in result["edits"]].count("llm") == 2
    else:
        # the model is asked again after its first edit fails parity, and the call budget ends round two
        assert "LLM call budget exhausted (5 calls)" in result["summary"]
        assert len(server.requests) == 4 and result["llm"]["calls"] == 4 + 1
        _assert_parity_evidence(_first_prompt(server.requests[3]))
        assert [e["kind"] for e in result["edits"]].count("llm") == 1
    assert len(server.script) > 0


@pytest.mark.slow
def test_without_a_model_the_same_failure_ends_partial_with_the_evidence(tmp_path):
    repo = tmp_path / "repo"
    shutil.copytree(FIXTURE, repo, ignore=shutil.ignore_patterns("__pycache__"))
    res = subprocess.run(
        [sys.executable, "-m", "agent.cli", "migrate", str(repo), "--run", "python train.py", "--offline", "--json",
         "--state-dir", str(tmp_path / "state"), "--out", str(tmp_path / "out")],
        cwd=ROOT, capture_output=True, text=True, timeout=900, env={**os.environ, "FERRY_LLM_API_KEY": "k"})
    assert res.returncode == 1, res.stdout[-3000:] + res.stderr[-3000:]
    result = json.loads(res.stdout)
    # the side runs measured that neither 'highest' matmuls nor aligned random draws remove it: the offline
    # policy's parity rule (matmul precision) does not apply, and the summary says what was measured
    assert result["status"] == "partial"
    summary = result["summary"]
    assert summary.startswith("the migrated code runs on tpx but parity fails: first divergence Net.norm#0 "
                              "(measured: with torch.set_float32_matmul_precision('highest') on tpx")
    assert "the divergence at Net.norm#0:out remains" in summary and "(likely" not in summary
    assert ("rules already applied: none. No measured setting removes the divergence, so it is not rounding "
            "drift") in summary
    assert result["llm"]["calls"] == 0
    nodes = [s["node"] for s in result["steps"]]
    assert nodes[-1] == "parity" and "llm_fix" not in nodes
