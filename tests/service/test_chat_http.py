"""Talking to a session through the real server: offline intents act on the session (approve, a new run
command starts a new attempt, reject), replies stream as events; with a model configured on the server,
the model answers (a scripted OpenAI-compatible server on loopback, through the real openai client)."""

from __future__ import annotations

import time
from pathlib import Path

from service_client import PLAIN, PROG, create, read_events, scripted, wait_state, write_repo


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
    assert view["state"] == "waiting_for_approval", view  # the same question, asked again in attempt 2
    no = say(c, sid, "reject")
    assert no["intent"] == "reject"
    view = wait_state(c, sid, {"finished", "failed"})
    assert view["status"] == "rejected"

    events = read_events(c, sid, after=0, header=False)
    assert [e["id"] for e in events] == list(range(1, len(events) + 1))
    talk = [(e["event"], e["data"].get("intent")) for e in events if e["event"] in ("message", "reply")]
    assert talk == [("message", None), ("reply", "explain"), ("message", None), ("reply", "unknown"),
                    ("message", None), ("reply", "approve"), ("message", None), ("reply", "set_run"),
                    ("message", None), ("reply", "reject")]
    assert [e["data"] for e in events if e["event"] == "attempt"] == [
        {"attempt": 2, "why": "options changed: run"}]
    assert [e["data"]["action"] for e in events if e["event"] == "approval_answer"] == ["approve", "reject"]


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
