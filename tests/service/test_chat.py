"""The chat of a migration session: each offline intent, the line lookup, ambiguity, unknown text and the
state-dependent answers; then the model's reply through the scripted OpenAI-compatible server (real HTTP)."""

from __future__ import annotations

import json

import pytest

from agent.chat.diffs import hunks_of
from agent.chat.intents import Decide, Retry, SessionFacts, SetOptions, SkipRules, reply
from agent.chat.model_replies import model_reply
from agent.llm import scripted
from agent.llm.client import ChatClient
from agent.llm.config import LLMConfig
from agent.migration import adapters
from agent.migration.records import Edit, ReviewItem
from agent.policy.catalogue import known_rules
from tools.patch import file_diff

# 40 lines of set-up, then CUDA AMP at line 44 (autocast, FRY024) and 47 (GradScaler, FRY025)
MODEL = ("import torch\n\n" + "".join(f"W{i} = {i}\n" for i in range(38)) + "\n\ndef train(x):\n"
         "    x = x.cuda()\n    with torch.cuda.amp.autocast():\n        y = x * 2\n"
         "    scaler = torch.cuda.amp.GradScaler()\n    return y.double().sum(), scaler\n")
RULES = known_rules()


@pytest.fixture(scope="module")
def findings(tmp_path_factory) -> list[ReviewItem]:
    """The scan of the original model.py, as the migration's state keeps it."""
    repo = tmp_path_factory.mktemp("scanned")
    (repo / "model.py").write_text(MODEL)
    return [ReviewItem(rule=f.rule_id, file=f.file, line=f.line, category=f.category, message=f.message)
            for f in adapters.scan(repo).findings]


@pytest.fixture(scope="module")
def edits(tmp_path_factory) -> list[Edit]:
    """A real catalogue rewrite of model.py (FRY002, FRY024, FRY025...) and a policy edit after it."""
    repo = tmp_path_factory.mktemp("repo")
    (repo / "model.py").write_text(MODEL)
    result = adapters.rewrite(repo, device="accelerator")
    (entry,) = result.files
    rewrite = Edit(step="rewrite", kind="codemod", rule=",".join(entry.applied_rules), files=["model.py"],
                   diff=file_diff("model.py", entry.original, entry.rewritten),
                   reason="catalogue codemods (CUDA_IDIOMS.md)")
    fixed = entry.rewritten.replace("y.double().sum()", "y.float().sum()")
    policy = Edit(step="fix-1", kind="policy", rule="float64_to_float32", files=["model.py"], site="model.py:48",
                  diff=file_diff("model.py", entry.rewritten, fixed),
                  reason="tpx has no float64: y.double() -> y.float() at model.py:48")
    return [rewrite, policy]


def facts(edits: list[Edit], state: str = "finished", **kw) -> SessionFacts:
    base = {"state": state, "status": "migrated" if state == "finished" else None, "summary": "runs on tpx",
            "run": "python train.py", "test": None, "device": "accelerator", "skip_rules": [], "edits": edits,
            "interrupts": [], "rules": RULES}
    return SessionFacts(**{**base, **kw})


def _line_of(edit: Edit, needle: str) -> int:
    for h in hunks_of(edit.diff):
        body = [ln for ln in h.text.splitlines()[1:] if not ln.startswith("-")]
        for offset, ln in enumerate(body):
            if needle in ln:
                return h.new_start + offset
    raise AssertionError(f"{needle!r} not in {edit.diff}")


def test_the_rewrite_edit_is_real(edits):
    assert {"FRY002", "FRY024", "FRY025"} <= set(edits[0].rule.split(","))


@pytest.mark.parametrize("question", ["why did you change line {n}?", "why line {n} of model.py"])
def test_why_line_names_the_edit_covering_it_with_reason_and_diff(edits, question):
    n = _line_of(edits[0], "torch.autocast")
    r = reply(question.format(n=n), facts(edits))
    assert r.intent == "explain" and r.action is None
    assert "catalogue codemods" in r.text and "FRY024" in r.text and "```diff" in r.text
    assert "-    with torch.cuda.amp.autocast():" in r.text
    assert "tpx has no float64" not in r.text  # the policy edit changed another line


def test_a_context_line_inside_a_hunk_names_the_edits_whose_hunk_covers_it(edits):
    n = _line_of(edits[0], "y = x * 2")  # unchanged, between the autocast and the GradScaler changes
    assert all(n not in h.changed_new for h in hunks_of(edits[0].diff))
    r = reply(f"why line {n}?", facts(edits))
    assert r.intent == "explain" and "catalogue codemods" in r.text and "torch.autocast" in r.text


def test_why_a_line_no_edit_touched_lists_the_edited_lines(edits):
    r = reply("why did you change line 10?", facts(edits))
    assert r.intent == "explain" and "No edit" in r.text and "line 10" in r.text
    assert "model.py lines" in r.text and str(_line_of(edits[1], "y.float()")) in r.text
    r2 = reply(f"why line {_line_of(edits[0], 'torch.autocast')} of other.py", facts(edits))
    assert "No edit" in r2.text and "other.py" in r2.text


def test_explain_a_rule_gives_its_edits_or_says_it_made_none(edits):
    r = reply("explain float64_to_float32", facts(edits))
    assert r.intent == "explain" and "tpx has no float64" in r.text and "+    return y.float().sum(), scaler" in r.text
    none = reply("explain FRY012", facts(edits))
    assert none.intent == "explain" and "FRY012 made no edit" in none.text and "Edited: model.py" in none.text


def test_explain_a_codemod_rule_shows_its_own_changes_sites_and_catalogue_link(edits, findings):
    """Issue 27: one rule of a codemod edit of several: its changes only (not the neighbouring rules'), where,
    and the idiom catalogue's section; no design document the user does not have."""
    r = reply("explain FRY024", facts(edits, findings=findings))
    n = _line_of(edits[0], "torch.autocast")
    assert r.intent == "explain" and r.action is None
    assert f"model.py:{n}" in r.text and "docs/idioms.md#fry024" in r.text
    assert "-    with torch.cuda.amp.autocast():" in r.text and "torch.autocast" in r.text
    assert "GradScaler" not in r.text and ".cuda()" not in r.text and "y.float()" not in r.text
    assert "CUDA_IDIOMS" not in r.text and "catalogue codemods" not in r.text
    policy = reply("explain float64_to_float32", facts(edits, findings=findings))
    assert "docs/idioms.md" not in policy.text and "+    return y.float().sum(), scaler" in policy.text


def test_no_reply_cites_a_design_document_the_user_lacks(edits, findings):
    n = _line_of(edits[0], "torch.autocast")
    for text in (f"why line {n}?", "why model.py", "explain", "explain FRY002"):
        r = reply(text, facts(edits, findings=findings))
        assert r.intent == "explain" and "CUDA_IDIOMS" not in r.text, (text, r.text)
        assert "docs/idioms.md" in r.text or text != "explain FRY002"


def test_skip_amp_is_ambiguous_and_lists_the_candidates(edits):
    r = reply("skip the AMP change", facts(edits))
    assert r.action is None and "which one" in r.text
    assert "`FRY024` (applied)" in r.text and "`FRY025` (applied)" in r.text
    assert r.intent == "revert_rule"
    every = reply("skip all the AMP changes", facts(edits))
    assert isinstance(every.action, SkipRules) and {"FRY024", "FRY025"} <= set(every.action.rules)


def test_skip_by_words_picks_the_one_rule_applied(edits):
    r = reply("don't change the GradScaler", facts(edits))
    assert r.intent == "revert_rule" and r.action == SkipRules(rules=["FRY025"])
    assert "Reverting FRY025" in r.text


def test_skip_and_revert_by_id(edits):
    skip = reply("don't do FRY020", facts(edits))
    assert skip.intent == "skip_rule" and skip.action == SkipRules(rules=["FRY020"]) and "Skipping FRY020" in skip.text
    revert = reply("revert FRY024", facts(edits))
    assert revert.intent == "revert_rule" and revert.action == SkipRules(rules=["FRY024"])
    already = reply("skip FRY020", facts(edits, skip_rules=["FRY020"]))
    assert already.action is None and "skipped already" in already.text
    unknown = reply("skip FRY999", facts(edits))
    assert unknown.action is None and "FRY999" in unknown.text
    queued = reply("skip FRY024", facts([], state="queued"))
    assert queued.intent == "skip_rule" and queued.action == SkipRules(rules=["FRY024"])
    assert "when it starts" in queued.text


@pytest.mark.parametrize(("text", "intent", "field", "value"), [
    ("the run command is python main.py --x", "set_run", "run", "python main.py --x"),
    ("run with `python main.py --steps 2`", "set_run", "run", "python main.py --steps 2"),
    ("the test command is python -m pytest -q tests", "set_test", "test", "python -m pytest -q tests"),
    ("use tpx, not the generic device", "set_device", "device", "tpx"),
    ("target tpx", "set_device", "device", "tpx"),
    ("use the generic device, not tpx", "set_device", "device", "accelerator"),
    ("don't use tpx", "set_device", "device", "accelerator"),
])
def test_option_changes(edits, text, intent, field, value):
    f = facts(edits, device="tpx") if value == "accelerator" else facts(edits)
    r = reply(text, f)
    assert r.intent == intent and isinstance(r.action, SetOptions) and getattr(r.action, field) == value
    assert "try again" in r.text  # finished: it applies when the migration runs again


def test_option_change_while_running_applies_to_the_next_attempt(edits):
    r = reply("the run command is python main.py", facts(edits, state="running"))
    assert r.action == SetOptions(run="python main.py") and "next attempt" in r.text
    same = reply("the run command is python train.py", facts(edits))
    assert same.action is None and "already" in same.text
    device = reply("target tpx", facts(edits, device="tpx"))
    assert device.action is None and "already" in device.text


def test_retry_depends_on_the_state(edits):
    done = reply("try again", facts(edits, state="failed", status="partial"))
    assert done.intent == "retry" and done.action == Retry()
    running = reply("retry", facts(edits, state="running"))
    assert running.intent == "retry" and running.action is None and "running" in running.text


def test_approve_and_reject_only_while_waiting(edits):
    question = {"rule": "float64_to_float32", "site": "model.py:48", "reason": "tpx has no float64", "diff": ""}
    waiting = facts(edits, state="waiting_for_approval", interrupts=[question])
    ok = reply("approve", waiting)
    assert ok.intent == "approve" and ok.action == Decide(action="approve") and "model.py:48" in ok.text
    no = reply("reject", waiting)
    assert no.intent == "reject" and no.action == Decide(action="reject")
    nothing = reply("approve", facts(edits))
    assert nothing.intent == "approve" and nothing.action is None and "nothing to approve" in nothing.text


def test_a_guard_question_says_what_approving_and_rejecting_it_mean(edits):
    """Issue 30: a test lost in the tests run (the test guard's GRD007) is asked as its own question; approving
    accepts it, rejecting lets the guard's refusal stand (guard_refused), not the edit's `rejected`."""
    question = {"type": "approve_guard", "rule": "GRD007", "site": "tests/test_a.py", "reason": "a test is lost"}
    waiting = facts(edits, state="waiting_for_approval", interrupts=[question])
    ok = reply("approve", waiting)
    assert ok.action == Decide(action="approve") and ok.text == (
        "Approved: the test guard's GRD007 at tests/test_a.py is accepted and recorded as such.")
    no = reply("reject", waiting)
    assert no.action == Decide(action="reject") and "guard_refused" in no.text and "ends rejected" not in no.text


def test_status_and_help(edits):
    for text in ("status", "what are you doing?"):
        r = reply(text, facts(edits, state="running"))
        assert r.intent == "status" and r.action is None and "running" in r.text and "2 edit(s)" in r.text
    h = reply("help", facts(edits))
    assert h.intent == "help" and "explain" in h.text and "skip" in h.text


@pytest.mark.parametrize("text", ["make it faster", "what is the meaning of life", "   "])
def test_anything_else_is_an_honest_unknown(edits, text):
    r = reply(text, facts(edits))
    assert r.action is None
    assert r.intent == ("help" if not text.strip() else "unknown")
    assert "retry" in r.text and "skip" in r.text
    if text.strip():
        assert "did not understand" in r.text


# --- with a model (the scripted OpenAI-compatible server, real HTTP through the openai client) -----------------


def _client(server: scripted.ScriptedLLM) -> ChatClient:
    return ChatClient(LLMConfig(base_url=server.base_url, model="scripted", api_key="k", backoff_s=0.0,
                                max_retries=0))


def test_model_answers_from_the_facts_and_acts_through_a_tool(edits):
    call = scripted.tool_call("skip_rules", {"rules": ["FRY024"]})
    with scripted.ScriptedLLM([scripted.reply(call, content="Leaving the autocast change out.")]) as server:
        r = model_reply("please keep my autocast as it was", facts(edits), _client(server))
        body = server.requests[0]["body"]
    assert r.text == "Leaving the autocast change out." and r.action == SkipRules(rules=["FRY024"])
    assert r.intent == "revert_rule"
    tools = {t["function"]["name"]: t["function"]["parameters"] for t in body["tools"]}
    assert set(tools) == {"set_options", "retry", "skip_rules", "decide"}
    assert "kind" not in tools["skip_rules"]["properties"] and tools["skip_rules"]["required"] == ["rules"]
    assert tools["set_options"]["properties"]["device"]["anyOf"][0]["enum"] == ["accelerator", "tpx"]
    system = body["messages"][0]["content"]
    assert "tpx has no float64" in system and "python train.py" in system and "runs on tpx" in system
    assert "docs/idioms.md#fry013" in system and "CUDA_IDIOMS" not in system
    assert body["messages"][-1] == {"role": "user", "content": "please keep my autocast as it was"}


def test_model_invalid_or_out_of_state_calls_are_dropped_with_a_note(edits):
    bad = scripted.tool_call("set_options", {"device": "gpu"})
    decide = scripted.tool_call("decide", json.dumps({"action": "approve"}), call_id="call_2")
    with scripted.ScriptedLLM([scripted.reply(bad, content="Switching."), scripted.reply(decide)]) as server:
        r = model_reply("use a gpu", facts(edits), _client(server))
        r2 = model_reply("go on", facts(edits), _client(server))
    assert r.action is None and "Switching." in r.text and "invalid" in r.text and "device" in r.text
    assert r2.action is None and "nothing to approve" in r2.text


def test_model_failure_falls_back_to_the_offline_reply_with_a_note(edits):
    with scripted.ScriptedLLM([scripted.error(400, "bad request")]) as server:
        r = model_reply("try again", facts(edits, state="failed"), _client(server))
    assert r.action == Retry() and r.intent == "retry"
    assert "model failed" in r.text and "HTTP 400" in r.text
