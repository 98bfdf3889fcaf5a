"""Talking to a session through the real server: offline intents act on the session (approve, a new run
command starts a new attempt whose same question is answered from memory), replies stream as events;
one rule explained, skipped by every path, and no server path in what the user reads; with a model
configured on the server, the model answers (a scripted OpenAI-compatible server on loopback, through the
real openai client)."""

from __future__ import annotations

import json
import time
from pathlib import Path

from service_client import PLAIN, PROG, create, read_events, wait_state, write_repo

from agent.llm import scripted


def say(c, sid: str, text: str) -> dict:
    got = c.post(f"/v1/sessions/{sid}/messages", json={"text": text})
    assert got.status_code == 202, got.text
    return got.json()


def test_offline_chat_explains_approves_changes_the_run_command_and_rejects(serve, tmp_path: Path) -> None:
    roots = tmp_path / "roots"
    repo = write_repo(roots, "prog", PROG)
    srv = serve("--allow-root", str(roots))
    c = srv.client
    sid = create(c, repo, approve=True).json()["id"]
    wait_state(c, sid, {"waiting_for_approval"})

    why = say(c, sid, "why did you change line 3?")
    assert why["intent"] == "explain" and why["action"] is None
    assert "FRY001" in why["text"] and "torch.device" in why["text"]
    unknown = say(c, sid, "what is the weather like on the moon")
    assert unknown["intent"] == "unknown" and "retry" in unknown["text"].lower()
    assert c.get(f"/v1/sessions/{sid}").json()["state"] == "waiting_for_approval"  # nothing was done

    ok = say(c, sid, "approve")
    assert ok["intent"] == "approve" and ok["action"] == {"kind": "decide", "action": "approve"}
    view = wait_state(c, sid, {"finished", "failed"})
    assert view["status"] == "migrated" and view["attempt"] == 1

    changed = say(c, sid, "the run command is `python prog.py --seed 3`")
    assert changed["intent"] == "set_run" and changed["action"]["run"] == "python prog.py --seed 3"
    assert "Attempt 2 is queued" in changed["text"]
    view = wait_state(c, sid, {"waiting_for_approval", "finished", "failed"})
    assert view["attempt"] == 2 and view["options"]["run"] == "python prog.py --seed 3"
    # the same question at the same site, answered in attempt 1: answered again from memory, not asked
    assert view["state"] == "finished" and view["status"] == "migrated", view
    no = say(c, sid, "reject")
    assert no["intent"] == "reject" and no["action"] is None and "nothing to reject" in no["text"]

    events = read_events(c, sid, after=0, header=False)
    assert [e["id"] for e in events] == list(range(1, len(events) + 1))
    talk = [(e["event"], e["data"].get("intent")) for e in events if e["event"] in ("message", "reply")]
    assert talk == [("message", None), ("reply", "explain"), ("message", None), ("reply", "unknown"),
                    ("message", None), ("reply", "approve"), ("message", None), ("reply", "set_run"),
                    ("message", None), ("reply", "reject")]
    assert [e["data"] for e in events if e["event"] == "attempt"] == [
        {"attempt": 2, "why": "options changed: run"}]
    asked = [e["data"] for e in events if e["event"] == "approval_request"]
    assert len(asked) == 2 and asked[0]["site"] == asked[1]["site"] and asked[0]["diff"] == asked[1]["diff"]
    answers = [e["data"] for e in events if e["event"] == "approval_answer"]
    assert [(a["action"], a.get("remembered", False)) for a in answers] == [("approve", False), ("approve", True)]
    assert answers[1]["site"] == asked[0]["site"]


def test_with_a_model_on_the_server_the_model_answers_and_acts(serve, tmp_path: Path) -> None:
    roots = tmp_path / "roots"
    repo = write_repo(roots, "plain", PLAIN)
    call = scripted.tool_call("set_options", {"device": "tpx"})
    script = [scripted.reply(call, content="Targeting tpx directly, as you asked.")]
    with scripted.ScriptedLLM(script) as llm:
        srv = serve("--allow-root", str(roots), env={"FERRY_LLM_BASE_URL": llm.base_url,
                                                     "FERRY_LLM_MODEL": "scripted", "FERRY_LLM_API_KEY": "k"})
        c = srv.client
        sid = create(c, repo, llm=False).json()["id"]  # the migration itself uses the offline policy
        wait_state(c, sid, {"finished", "failed"})
        answer = say(c, sid, "use the tpx device name explicitly please")
        assert answer["text"].startswith("Targeting tpx directly")
        assert answer["action"] == {"kind": "set_options", "run": None, "test": None, "device": "tpx"}
        deadline = time.monotonic() + 240
        while (view := c.get(f"/v1/sessions/{sid}").json())["attempt"] == 1 or view["state"] not in ("finished",
                                                                                                     "failed"):
            assert time.monotonic() < deadline, view
            time.sleep(0.3)
        assert view["attempt"] == 2 and view["options"]["device"] == "tpx" and view["status"] == "migrated"
        assert 'torch.device("tpx")' in c.get(f"/v1/sessions/{sid}/patch").text
        asked = llm.requests[-1]["body"]
        sent = str(asked["messages"])
        assert "use the tpx device name explicitly please" in sent and "FRY001" in sent
        assert {t["function"]["name"] for t in asked["tools"]} >= {"set_options", "retry", "skip_rules", "decide"}


# torch.cuda.synchronize() at line 6: FRY013 rewrites it, beside three other codemods' changes at lines 3-5
SYNC = PROG.replace("for step", "torch.cuda.synchronize()\nfor step")


def _no_server_path(text: str, data_dir: Path) -> None:
    for path in {str(data_dir), str(data_dir.resolve())}:
        assert path not in text, text[max(0, text.find(path) - 200):text.find(path) + 200]


def test_explain_a_rule_skip_it_everywhere_and_no_server_path(serve, tmp_path: Path) -> None:
    """Issue 27: `explain FRY013` is that rule's change only, with its sites and the catalogue's link; after
    `skip FRY013` no later fixer makes the change either, and the summary says so truly; what the user reads
    names no path of the server."""
    roots = tmp_path / "roots"
    repo = write_repo(roots, "prog", SYNC)
    srv = serve("--allow-root", str(roots))
    c = srv.client
    sid = create(c, repo, approve=True).json()["id"]
    view = wait_state(c, sid, {"waiting_for_approval", "finished", "failed"})
    assert view["state"] == "waiting_for_approval", view

    why = say(c, sid, "explain FRY013")
    text = why["text"]
    assert why["intent"] == "explain" and "FRY013" in text and "synchronize" in text
    assert "prog.py:6" in text and "docs/idioms.md#fry013" in text
    assert "-torch.cuda.synchronize()" in text and "+torch.get_device_module(device).synchronize()" in text
    assert 'torch.device("cuda")' not in text and ".cuda()" not in text  # FRY001/FRY002's changes are not shown
    assert "CUDA_IDIOMS" not in text and "catalogue codemods" not in text

    say(c, sid, "approve")
    assert wait_state(c, sid, {"finished", "failed"})["status"] == "migrated"
    assert "synchronize()" in c.get(f"/v1/sessions/{sid}/patch").text  # attempt 1 made FRY013's change

    skip = say(c, sid, "skip FRY013")
    assert skip["action"] == {"kind": "skip_rules", "rules": ["FRY013"]}
    view = wait_state(c, sid, {"waiting_for_approval", "finished", "failed"})
    assert view["attempt"] == 2 and view["state"] == "finished", view  # no fixer offered the change again
    assert view["status"] == "needs_human" and "FRY013" in view["summary"] and "asked to skip" in view["summary"]
    assert "rules skipped by request: FRY013" in view["summary"]
    patch = c.get(f"/v1/sessions/{sid}/patch").text
    changed = [ln for ln in patch.splitlines() if ln[:1] in "+-" and not ln.startswith(("+++", "---"))]
    assert changed and not [ln for ln in changed if "synchronize" in ln], patch  # FRY013's change is not made
    assert '-device = torch.device("cuda")' in changed  # the other rules' changes are

    events = read_events(c, sid, after=0, header=False)
    made = [e["data"]["step"] for e in events if e["event"] == "edit" and any(
        ln[:1] in "+-" and "synchronize" in ln for ln in e["data"]["diff"].splitlines())]
    assert made == ["rewrite"], made  # attempt 1's codemod only; no fixer made it in attempt 2
    ingest = [e["data"]["summary"] for e in events if e["event"] == "step" and e["data"]["node"] == "ingest"]
    assert len(ingest) == 2 and all("workspace" in s for s in ingest)
    _no_server_path(json.dumps(events), srv.data_dir)
    _no_server_path(json.dumps(c.get(f"/v1/sessions/{sid}").json()), srv.data_dir)
    _no_server_path(say(c, sid, "status")["text"], srv.data_dir)


def test_an_edit_answer_is_remembered_with_its_files_and_asked_again_when_they_do_not_validate(
        serve, tmp_path: Path) -> None:
    """Issue 27: an `edit` answer is given again in a later attempt that asks the same question (the reviewer's
    files, kept beside the session, reapplied); files that no longer read back whole are not used: asked again."""
    roots = tmp_path / "roots"
    repo = write_repo(roots, "prog", PROG)
    srv = serve("--allow-root", str(roots))
    c = srv.client
    sid = create(c, repo, approve=True).json()["id"]
    view = wait_state(c, sid, {"waiting_for_approval", "finished", "failed"})
    assert view["state"] == "waiting_for_approval", view
    proposal = view["interrupts"][0]["diff"]
    assert ".float()" in proposal
    mine = proposal.replace(".float()", ".to(torch.float32)")
    assert c.post(f"/v1/sessions/{sid}/approval", json={"action": "edit", "diff": mine}).status_code == 202
    view = wait_state(c, sid, {"finished", "failed"})
    assert view["status"] == "migrated", view
    assert "to(torch.float32)" in c.get(f"/v1/sessions/{sid}/patch").text

    say(c, sid, "the run command is `python prog.py --seed 3`")
    view = wait_state(c, sid, {"waiting_for_approval", "finished", "failed"})
    # the same question, answered with an edit in attempt 1: the reviewer's version again, not asked
    assert view["attempt"] == 2 and view["state"] == "finished" and view["status"] == "migrated", view
    assert "to(torch.float32)" in c.get(f"/v1/sessions/{sid}/patch").text
    kinds = [e["kind"] for e in c.get(f"/v1/sessions/{sid}/result").json()["result"]["edits"]]
    assert kinds == ["codemod", "human"]
    events = read_events(c, sid, after=0, header=False)
    answers = [e["data"] for e in events if e["event"] == "approval_answer"]
    assert [(a["action"], a["files"], a.get("remembered", False)) for a in answers] == [
        ("edit", ["prog.py"], False), ("edit", ["prog.py"], True)]

    # the kept files altered behind the server's back: their digest no longer matches, the question is asked
    kept = list((srv.data_dir / "sessions" / sid / "answers").glob("*.json"))
    assert len(kept) == 1
    data = json.loads(kept[0].read_text())
    assert data["files"]["prog.py"].count("to(torch.float32)") == 1
    data["files"]["prog.py"] += "import os\n"
    kept[0].write_text(json.dumps(data))
    say(c, sid, "the run command is `python prog.py --seed 4`")
    view = wait_state(c, sid, {"waiting_for_approval", "finished", "failed"})
    assert view["attempt"] == 3 and view["state"] == "waiting_for_approval", view
    last = view["counts"]["events"]  # a waiting session's stream stays open: read it up to its last event
    events = read_events(c, sid, after=0, header=False, until=lambda e: e["id"] >= last)
    assert len([e for e in events if e["event"] == "approval_answer"]) == 2  # nothing answered from memory
