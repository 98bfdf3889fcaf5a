"""Where the model is consulted beyond run failures, through the scripted OpenAI-compatible server on
loopback and the real openai client: a parity failure no rule fixes, a model edit the CPU guard rejects,
and an environment failure (explained, never acted on).

The parity fixture (tests/agent/fixtures/attention_entry) is a self-attention block run as
``python -m attn``: on tpx its float32 matmuls round their inputs to bf16, so parity fails at the
first projection (``SelfAttention.q_proj#0``, drift of bf16 size, attributed to matmul precision).
The offline precision rule would put its fix into ``attn/train.py`` (the first module the run executes that
imports torch; the entry, ``attn/__main__.py``, imports none): these tests leave it out (``--skip-rule``), so
that no offline rule explains the failure and the model is asked.
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
FIXTURE = Path(__file__).with_name("fixtures") / "attention_entry"

IMPORT = "from attn.model import SelfAttention\n"
PRECISION = IMPORT + '\ntorch.set_float32_matmul_precision("highest")\n'
MIGRATED_DEVICE = 'device = torch.accelerator.current_accelerator(check_available=True) or torch.device("cpu")'
TPX_ONLY = 'device = torch.device("tpx")'
NO_OFFLINE_PRECISION = ("--skip-rule", "matmul_precision_highest")


def _migrate(tmp_path: Path, server, repo: Path, command: str, *extra: str) -> tuple[dict, str]:
    env = {**os.environ, "FERRY_LLM_API_KEY": "k"}
    env.pop("FERRY_LLM_BASE_URL", None)
    res = subprocess.run(
        [sys.executable, "-m", "agent.cli", "migrate", str(repo), "--run", command, "--llm",
         "--llm-base-url", server.base_url, "--llm-model", "scripted", "--json",
         "--state-dir", str(tmp_path / "state"), "--out", str(tmp_path / "out"), *extra],
        cwd=ROOT, capture_output=True, text=True, timeout=900, env=env)
    assert res.returncode in (0, 1), res.stdout[-3000:] + res.stderr[-3000:]
    return json.loads(res.stdout), res.stderr


def _attention_repo(tmp_path: Path) -> Path:
    repo = tmp_path / "repo"
    shutil.copytree(FIXTURE, repo, ignore=shutil.ignore_patterns("__pycache__"))
    return repo


def _edit(search: str, replace: str, call_id: str) -> dict:
    return scripted.tool_call("apply_edit", {"path": "attn/train.py", "search": search, "replace": replace}, call_id)


def _prompt(request: dict) -> str:
    return request["body"]["messages"][1]["content"]


def _assert_parity_evidence(prompt: str) -> None:
    for expected in (
        "probe key SelfAttention.q_proj#0 = module SelfAttention.q_proj (class Linear",  # the divergent module
        "Likely cause: matmul_precision: ", "reduced matmul precision 'bf16'",  # the attributed cause
        "Parity table (module calls in execution order", "> 0 SelfAttention.q_proj#0 (Linear, step 0): inputs pass, "
        "outputs fail, max_abs ",  # the table
        "Input tensor SelfAttention.q_proj#0:in", "pass at the 'assert_close' check; max_abs 0",  # inputs' metrics
        "Failing tensor SelfAttention.q_proj#0:out", "metrics: max_abs ", "tolerances (float32)",  # outputs' metrics
        "self.q_proj = nn.Linear(dim, dim)", "Offline rules already applied: none",
    ):
        assert expected in prompt, f"{expected!r} missing from the model's prompt:\n{prompt}"


@pytest.mark.slow
def test_model_reads_the_parity_evidence_and_applies_the_precision_fix(tmp_path):
    repo = _attention_repo(tmp_path)
    script = [scripted.reply(_edit(IMPORT, PRECISION, "c1"),
                             scripted.tool_call("finish", {"summary": "full fp32 matmuls: bf16 drift"}, "c2"))]
    with scripted.ScriptedLLM(script) as server:
        result, stderr = _migrate(tmp_path, server, repo, "python -m attn", *NO_OFFLINE_PRECISION)
    assert result["status"] == "migrated", (result["summary"], stderr[-3000:])
    assert result["parity"]["passed"] is True and result["cpu_check"]["verdict"] == "pass"
    assert len(server.requests) == 1
    _assert_parity_evidence(_prompt(server.requests[0]))
    assert [(e["kind"], e["rule"], e["site"]) for e in result["edits"] if e["kind"] != "codemod"] == [
        ("llm", "llm", "parity:SelfAttention.q_proj#0")]
    assert '+torch.set_float32_matmul_precision("highest")' in (tmp_path / "out" / "ferry.patch").read_text()
    assert (repo / "attn" / "train.py").read_text() == (FIXTURE / "attn" / "train.py").read_text()


@pytest.mark.slow
def test_a_model_edit_that_breaks_the_cpu_path_is_rejected_and_the_model_told_why(tmp_path):
    repo = _attention_repo(tmp_path)
    script = [
        # round 1: full fp32 matmuls, but the device hard-coded to tpx: parity passes, the CPU path is gone
        scripted.reply(_edit(IMPORT + "\n" + MIGRATED_DEVICE, PRECISION + "\n" + TPX_ONLY, "r1a"),
                       scripted.tool_call("finish", {"summary": "run on tpx with full fp32 matmuls"}, "r1b")),
        # round 2, told why: the precision fix alone
        scripted.reply(_edit(IMPORT, PRECISION, "r2a"),
                       scripted.tool_call("finish", {"summary": "full fp32 matmuls, device kept generic"}, "r2b")),
    ]
    with scripted.ScriptedLLM(script) as server:
        result, stderr = _migrate(tmp_path, server, repo, "python -m attn", *NO_OFFLINE_PRECISION)
    assert result["status"] == "migrated", (result["summary"], stderr[-3000:])
    assert len(server.requests) == 2 and not server.script
    second = _prompt(server.requests[1])
    # the guard's finding: the CPU run's error, the rejected edit, and the failure it was meant to fix
    assert "Your last edit was REJECTED by Ferry's CPU guard and reverted" in second
    assert "The CPU guard's finding: the migrated code no longer runs on CPU (the original does)" in second
    assert "tpx" in second.split("The CPU guard's finding:")[1].split("\n")[0]
    assert f"+{TPX_ONLY}" in second  # the rejected diff
    _assert_parity_evidence(second)  # the parity failure again, with its own report
    assert "cpu_guard_revert at parity:SelfAttention.q_proj#0 (llm): the CPU guard rejected the model's edit" in second
    edits = [(e["kind"], e["rule"]) for e in result["edits"] if e["kind"] != "codemod"]
    assert edits == [("llm", "llm"), ("llm", "cpu_guard_revert"), ("llm", "llm")]
    revert = next(e for e in result["edits"] if e["rule"] == "cpu_guard_revert")
    assert revert["step"] == "revert-fix-1" and revert["files"] == ["attn/train.py"]
    assert "the migrated code no longer runs on CPU" in revert["reason"]
    report_md = (tmp_path / "out" / "report.md").read_text()
    assert "cpu_guard_revert" in report_md
    cpu_checks = [r["status"] for r in result["run_log"] if r["kind"] == "cpu_check"]
    assert cpu_checks[0] == "failed" and cpu_checks[-1] == "ok"
    patch = (tmp_path / "out" / "ferry.patch").read_text()
    assert TPX_ONLY not in patch and '+torch.set_float32_matmul_precision("highest")' in patch
    nodes = [s["node"] for s in result["steps"]]
    assert nodes.count("llm_fix") == 2 and nodes.index("cpu_check") < len(nodes) - 1 - nodes[::-1].index("llm_fix")


MISSING = '''import torch
import ferry_absent_pkg

device = torch.device("cuda")
print(ferry_absent_pkg.VERSION, torch.ones(2, device=device).sum().item())
'''


@pytest.mark.slow
@pytest.mark.parametrize("server_ok", [True, False])
def test_an_environment_failure_gets_an_explanation_and_keeps_its_status(tmp_path, server_ok):
    repo = tmp_path / "repo"
    repo.mkdir()
    (repo / "prog.py").write_text(MISSING)
    explanation = "The package ferry_absent_pkg is not installed in the interpreter the runs use."
    script = ([scripted.reply(scripted.tool_call("run", {"command": "pip install ferry-absent-pkg"}, "x1"),
                              content=explanation)] if server_ok else [scripted.error(400, "bad request")])
    with scripted.ScriptedLLM(script) as server:
        result, stderr = _migrate(tmp_path, server, repo, "python prog.py")
    assert result["status"] == "failed_environment", (result["summary"], stderr[-3000:])
    summary = result["summary"]
    assert f"{sys.executable} -m pip install ferry-absent-pkg" in summary  # the deterministic exact command
    assert len(server.requests) == 1
    body = server.requests[0]["body"]
    assert "tools" not in body and "tool_choice" not in body  # nothing to run or install with
    assert "-m pip install ferry-absent-pkg" in _prompt(server.requests[0])
    if server_ok:
        assert f"The model's explanation (from the model, not verified by Ferry): {explanation}" in summary
    else:
        assert "The model was asked to explain this failure but could not answer" in summary
        assert "HTTP 400" in summary
    # the tool call in the model's answer was never executed: no run beyond the migration's own
    assert {r["kind"] for r in result["run_log"]} <= {"reference", "target", "evidence", "cpu_original", "golden"}
    artifacts = tmp_path / "state" / "artifacts"
    assert not [p for p in artifacts.rglob("llm-*")]
    assert result["llm"]["calls"] == 2  # the plan's (no plan scripted: refused, the offline plan ran) and this one
    assert [s["node"] for s in result["steps"]][-1] == "llm_explain"  # then the report (not a step of its own)
