"""The model's plan (agent/llm/planner.py) against the scripted loopback server, through the real
openai client, and the routers of the model's profile round (no migrations here)."""

from __future__ import annotations

import json

from agent.llm import scripted
from agent.llm.client import ChatClient
from agent.llm.config import LLMConfig
from agent.llm.planner import TOOL, PlanReply, ask_plan, validate_plan
from agent.migration import edges
from agent.migration.records import Plan, ProfileRound, ReviewItem, ScanDigest, edit_by
from agent.migration.state import MigrationOptions, dump
from tools.profile.models import ProfileFinding, ProfileReport

SCAN = ScanDigest(counts={"auto": 2, "review": 1}, findings=[
    ReviewItem(rule="FRY001", file="train.py", line=3, category="auto", message="torch.device('cuda')"),
    ReviewItem(rule="FRY004", file="model.py", line=9, category="auto", message=".cuda()"),
    ReviewItem(rule="FRY011", file="model.py", line=20, category="review", message="cuda streams"),
])
OFFLINE = Plan(rewrite_files=["model.py", "train.py"], auto_fix=2, review=[SCAN.findings[2]], entry_file="train.py",
               codemod_device="accelerator", checks=["run", "parity", "profile"], max_iterations=8)


def _client(server, **kw) -> ChatClient:
    cfg = LLMConfig(base_url=server.base_url, model="scripted", api_key="k", **kw)
    return ChatClient(cfg, sleep=lambda s: None)


def test_validate_drops_what_the_scan_did_not_find():
    reply = PlanReply(files=["./train.py", "ghost.py", "train.py", "model.py"], findings=["f3", "F9", "F1", "F3"],
                      verify=["parity of the loss", " "])
    plan = validate_plan(reply, SCAN, ["train.py"])
    assert plan.files == ["train.py", "model.py"] and plan.findings == ["F3", "F1"]
    assert plan.verify == ["parity of the loss"]
    assert plan.warnings == ["dropped file 'ghost.py': not a file the scan found",
                             "dropped file 'train.py': named twice",
                             "dropped finding 'F9': not a finding id of the scan",
                             "dropped finding 'F3': named twice"]
    model_first = OFFLINE.model_copy(update={"model": plan})
    assert model_first.ordered_files() == ["train.py", "model.py"]  # the model's order; offline is sorted
    assert OFFLINE.ordered_files() == ["model.py", "train.py"]


def test_the_model_plans_through_its_tool():
    answer = {"files": ["train.py", "nowhere.py"], "findings": ["F2", "F1"], "verify": ["the loss matches"],
              "rationale": "the entry first"}
    with scripted.ScriptedLLM([], plans=[scripted.reply(scripted.tool_call(TOOL, answer))]) as server:
        client = _client(server)
        plan = ask_plan(client, SCAN, OFFLINE)
    assert plan.ok and plan.files == ["train.py"] and plan.findings == ["F2", "F1"]
    assert plan.warnings == ["dropped file 'nowhere.py': not a file the scan found"]
    assert client.usage.calls == 1 and client.usage.tokens == 120 and not server.requests
    body = server.plan_requests[0]["body"]
    [tool] = body["tools"]
    assert tool["function"]["name"] == TOOL
    assert tool["function"]["parameters"]["properties"].keys() == PlanReply.model_json_schema()["properties"].keys()
    prompt = body["messages"][1]["content"]
    assert "F3 model.py:20 [FRY011, review] cuda streams" in prompt and "Entry file (the run command runs it): " \
        "train.py" in prompt


def test_a_reply_without_the_plan_is_sent_back_once():
    bad = scripted.reply(content="I would start with train.py")
    good = scripted.reply(scripted.tool_call(TOOL, {"files": ["model.py"]}, "c2"))
    with scripted.ScriptedLLM([], plans=[bad, good]) as server:
        plan = ask_plan(_client(server), SCAN, OFFLINE)
    assert plan.ok and plan.files == ["model.py"]
    second = server.plan_requests[1]["body"]["messages"][-1]["content"]
    assert "did not call submit_plan" in second
    with scripted.ScriptedLLM([], plans=[bad, bad]) as server:
        plan = ask_plan(_client(server), SCAN, OFFLINE)
    assert not plan.ok and "no valid plan in 2 replies" in (plan.error or "")


def test_a_failing_server_gives_no_plan_and_counts_its_calls():
    with scripted.ScriptedLLM([], plans=[scripted.error(500)] * 3) as server:
        client = _client(server, max_retries=2)
        plan = ask_plan(client, SCAN, OFFLINE)
    assert not plan.ok and plan.error is not None and plan.error.startswith("failed_llm:")
    assert "kept failing after 2 retries" in plan.error
    assert client.usage.calls == 3 and client.usage.retries == 2 and len(server.plan_requests) == 3


def test_edits_say_who_made_them():
    assert [edit_by(k, r) for k, r in (("codemod", "FRY001,FRY004"), ("policy", "precision"), ("llm", "llm"),
                                       ("human", "llm"), ("revert", "revert"))] == [
        "rule FRY001,FRY004", "rule precision", "model", "person", "Ferry (revert)"]


# --- the profile round's routers -------------------------------------------------------------


def _opts(llm: bool) -> dict:
    return dump(MigrationOptions(source="/repo", run_command="python x.py", state_dir="/state", llm=llm))


def _profile(severity: str) -> dict:
    finding = ProfileFinding(kind="host_sync", severity=severity, title="device-to-host sync: item",
                      suggestion="keep it on the device", file="x.py", line=3, count=12)
    return dump(ProfileReport(profile_dir="/p", repo_root="/repo", findings=[finding]))


def test_after_profile_asks_the_model_once_and_only_under_llm():
    verifying = dump(ProfileRound(phase="verifying"))
    done = dump(ProfileRound(phase="rejected", reason="parity failed"))
    # final_status of these states is not "migrated" (no parity): the model is not asked to tune it
    unverified = {"options": _opts(True), "profile": _profile("high")}
    assert edges.after_profile(unverified) == "report"
    assert edges.after_profile({"options": _opts(False), "profile": _profile("high")}) == "report"
    assert edges.after_profile({"options": _opts(True), "profile": _profile("low")}) == "report"
    assert edges.after_profile({**unverified, "profile_round": done}) == "report"
    assert edges.after_profile({**unverified, "profile_round": verifying}) == "profile_verdict"
    assert edges.after_profile_llm({"proposal": {"rule": "llm"}}) == "apply_fix"
    assert edges.after_profile_llm({"proposal": None}) == "report"


def test_a_failure_while_verifying_the_change_reverts_it():
    verifying = {"options": _opts(True), "profile_round": dump(ProfileRound(phase="verifying"))}
    failed = json.loads(json.dumps({"command": ["python", "x.py"], "exit_code": 1, "status": "failed",
                                    "duration_s": 1.0, "stdout_tail": "", "stderr_tail": "", "isolation": "bwrap"}))
    assert edges.after_target({**verifying, "last_run": failed}) == "profile_revert"
    assert edges.after_tests({**verifying, "last_run": failed}) == "profile_revert"
    assert edges.after_parity({**verifying, "proposal": {"rule": "precision"}}) == "profile_revert"
    assert edges.after_apply({**verifying, "status": "rejected"}) == "profile_revert"
    assert edges.after_cpu_check({**verifying, "status": "failed_timeout"}) == "profile_revert"
    assert edges.after_target({**verifying, "status": "failed_internal"}) == "report"  # a Ferry bug ends it
    assert edges.after_target({"options": _opts(True), "last_run": failed}) == "diagnose"
