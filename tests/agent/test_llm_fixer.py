"""The LLM fixer against a scripted OpenAI-compatible server, through the real openai client."""

from __future__ import annotations

from pathlib import Path

import pytest

from agent.errors import BudgetExhausted, LLMFailure
from agent.llm import scripted
from agent.llm.client import ChatClient
from agent.llm.config import LLMConfig
from agent.llm.fixer import run_fixer
from agent.llm.functions import EditSession, tool_schemas
from agent.policy.base import Diagnosis, UserFrame

SRC = 'import torch\n\n\ndef metric(x):\n    return x.double().mean()\n'


def _repo(tmp_path: Path) -> Path:
    repo = tmp_path / "repo"
    repo.mkdir()
    (repo / "m.py").write_text(SRC)
    return repo


def _session(repo: Path) -> EditSession:
    def no_runs(*a):  # the tests below never ask the model's tools to run the program
        raise AssertionError("unexpected run")

    return EditSession(repo, repo, {}, no_runs, None, "python m.py", None)


def _diag() -> Diagnosis:
    return Diagnosis(phase="run", kind="other", exc_type="TypeError", message="tpx does not support float64",
                     frames=[UserFrame(file="m.py", line=5, function="metric")])


def _client(server, sleeps: list[float], **kw) -> ChatClient:
    cfg = LLMConfig(base_url=server.base_url, model="scripted-model", api_key="test-key", backoff_s=0.5, **kw)
    return ChatClient(cfg, sleep=sleeps.append)


EDIT = {"path": "m.py", "search": "x.double().mean()", "replace": "x.float().mean()"}


def test_tool_calls_read_edit_finish(tmp_path):
    repo = _repo(tmp_path)
    script = [
        scripted.reply(scripted.tool_call("read_file", {"path": "m.py", "start": 1, "end": 5})),
        scripted.reply(scripted.tool_call("apply_edit", EDIT, "c2")),
        scripted.reply(scripted.tool_call("finish", {"summary": "float64 -> float32"}, "c3")),
    ]
    with scripted.ScriptedLLM(script) as server:
        session = _session(repo)
        client = _client(server, [])
        summary = run_fixer(client, session, _diag(), ["float64_to_float32@m.py:5"])
    assert summary == "float64 -> float32"
    assert session.files == {"m.py": SRC.replace("x.double()", "x.float()")}
    assert (repo / "m.py").read_text() == SRC  # the model's edits never touch files directly
    assert client.usage.calls == 3 and client.usage.prompt_tokens == 300 and client.usage.completion_tokens == 60
    first = server.requests[0]["body"]
    assert first["model"] == "scripted-model" and server.requests[0]["auth"] == "Bearer test-key"
    assert {t["function"]["name"] for t in first["tools"]} >= {"read_file", "search_repo", "apply_edit", "apply_diff",
                                                               "run", "scan", "check_parity", "profile"}
    assert "float64_to_float32@m.py:5" in first["messages"][1]["content"]  # the model sees what rules tried
    # the tool result of read_file went back to the model with numbered lines
    tool_msgs = [m for m in server.requests[1]["body"]["messages"] if m["role"] == "tool"]
    assert "5:     return x.double().mean()" in tool_msgs[0]["content"]


def test_malformed_call_goes_back_then_succeeds(tmp_path):
    repo = _repo(tmp_path)
    script = [
        scripted.reply(scripted.tool_call("apply_edit", "{not json")),
        scripted.reply(scripted.tool_call("apply_edit", {"path": "m.py", "search": "x.double(",
                                                         "replace": "x.float((("}, "c2")),
        scripted.reply(scripted.tool_call("apply_edit", EDIT, "c3"),
                       scripted.tool_call("finish", {"summary": "done"}, "c4")),
    ]
    with scripted.ScriptedLLM(script) as server:
        session = _session(repo)
        run_fixer(_client(server, []), session, _diag(), [])
    errors = [m["content"] for m in server.requests[1]["body"]["messages"] if m["role"] == "tool"]
    assert "not valid JSON" in errors[-1]
    errors2 = [m["content"] for m in server.requests[2]["body"]["messages"] if m["role"] == "tool"]
    assert "does not parse" in errors2[-1]  # an edit whose result does not parse is rejected
    assert session.files["m.py"] == SRC.replace("x.double()", "x.float()")


def test_too_many_malformed_calls_fail_with_named_status(tmp_path):
    repo = _repo(tmp_path)
    script = [scripted.reply(scripted.tool_call("no_such_tool", {}, f"c{i}")) for i in range(5)]
    with scripted.ScriptedLLM(script) as server, pytest.raises(LLMFailure) as info:
        run_fixer(_client(server, [], max_malformed=2), _session(repo), _diag(), [])
    assert info.value.status == "failed_llm" and "malformed" in str(info.value)


def test_429_and_5xx_are_retried_with_backoff(tmp_path):
    repo = _repo(tmp_path)
    script = [
        scripted.error(429, "slow down"),
        scripted.error(503, "overloaded"),
        scripted.reply(scripted.tool_call("apply_edit", EDIT), scripted.tool_call("finish", {"summary": "ok"}, "c2")),
    ]
    sleeps: list[float] = []
    with scripted.ScriptedLLM(script) as server:
        session = _session(repo)
        client = _client(server, sleeps)
        run_fixer(client, session, _diag(), [])
    assert sleeps == [0.5, 1.0]  # exponential backoff
    assert client.usage.retries == 2 and len(server.requests) == 3
    assert "m.py" in session.files


def test_retries_exhausted_is_failed_llm(tmp_path):
    repo = _repo(tmp_path)
    with scripted.ScriptedLLM([scripted.error(500)] * 4) as server, pytest.raises(LLMFailure):
        run_fixer(_client(server, [], max_retries=2), _session(repo), _diag(), [])
    assert len(server.requests) == 3


def test_call_budget_exhaustion_is_failed_budget(tmp_path):
    repo = _repo(tmp_path)
    script = [scripted.reply(scripted.tool_call("search_repo", {"pattern": "double"}, f"c{i}")) for i in range(10)]
    with scripted.ScriptedLLM(script) as server, pytest.raises(BudgetExhausted) as info:
        run_fixer(_client(server, [], max_calls=3), _session(repo), _diag(), [])
    assert info.value.status == "failed_budget" and len(server.requests) == 3


def test_token_budget_counts_earlier_attempts(tmp_path):
    cfg = LLMConfig(base_url="http://127.0.0.1:9/v1", model="m", api_key="k", max_tokens=1000)
    client = ChatClient(cfg, {"calls": 2, "prompt_tokens": 900, "completion_tokens": 100})
    with pytest.raises(BudgetExhausted, match="token budget"):
        client.chat([{"role": "user", "content": "hi"}], tool_schemas())


def test_tool_schemas_come_from_pydantic_models():
    schemas = {t["function"]["name"]: t["function"] for t in tool_schemas()}
    edit = schemas["apply_edit"]["parameters"]
    assert set(edit["required"]) == {"path", "search", "replace"}
    assert schemas["read_file"]["parameters"]["properties"]["start"]["minimum"] == 1
