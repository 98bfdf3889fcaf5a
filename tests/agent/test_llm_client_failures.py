"""Every way a model server can misbehave ends in bounded time with a named status and reason, and
is counted: against the scripted OpenAI-compatible server on loopback, through the real openai client."""

from __future__ import annotations

import email.utils
import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from agent.errors import BudgetExhausted, LLMFailure
from agent.llm import scripted
from agent.llm.client import ChatClient, Usage, retry_after_s
from agent.llm.config import DEFAULTS, LLMConfig, resolve_limits
from agent.llm.fixer import run_fixer
from agent.llm.functions import EditSession, tool_schemas
from agent.migration.state import add_counters
from agent.policy.base import Diagnosis, UserFrame

ROOT = Path(__file__).resolve().parents[2]

MSGS = [{"role": "user", "content": "hi"}]
SRC = 'import torch\n\n\ndef metric(x):\n    return x.double().mean()\n'


def _cfg(base_url: str, **kw) -> LLMConfig:
    return LLMConfig(base_url=base_url, model="scripted", api_key="k", **{"backoff_s": 0.0, **kw})


def _chat(script, sleeps: list[float] | None = None, **kw) -> tuple[ChatClient, BaseException | None, float]:
    """One ``chat`` against the script: the client, what it raised, and how long it took."""
    with scripted.ScriptedLLM(script) as server:
        client = ChatClient(_cfg(server.base_url, **kw), sleep=(sleeps.append if sleeps is not None else time.sleep))
        t0 = time.monotonic()
        try:
            client.chat(MSGS, tool_schemas())
            raised = None
        except (LLMFailure, BudgetExhausted) as exc:
            raised = exc
        return client, raised, time.monotonic() - t0


@pytest.mark.parametrize(("step", "kind", "words"), [
    (scripted.raw(b"<html><body>502 Bad Gateway</body></html>", content_type="text/html"), "non_json", "not JSON"),
    (scripted.raw(b'{"id": "chatcmpl-1", "choices": [{"index": 0, "mess'), "truncated_json", "cut short"),
    (scripted.raw(b'"just a string"'), "malformed_reply", "not an object"),
    (scripted.raw(b'{"choices": [{"index": 0, "message": {"tool_calls": "nope"}}]}'), "malformed_reply",
     "not a chat message"),
    (scripted.no_choices(), "no_choices", "no choices"),
    (scripted.error(400, "bad request"), "http_error", "HTTP 400"),
])
def test_a_broken_reply_is_failed_llm_at_once_named_and_counted(step, kind, words):
    client, raised, took = _chat([step])
    assert isinstance(raised, LLMFailure) and raised.status == "failed_llm"
    assert f"LLM {kind}" in str(raised) and words in str(raised)
    assert client.usage.calls == 1 and client.usage.failures == {kind: 1} and client.usage.retries == 0
    assert took < 30


def test_a_reply_with_no_choices_still_counts_its_tokens():
    client, raised, _ = _chat([scripted.no_choices()])
    assert isinstance(raised, LLMFailure) and client.usage.prompt_tokens == 10


def test_an_oversized_reply_is_refused():
    client, raised, _ = _chat([scripted.huge(5000)], max_reply_chars=1000)
    assert isinstance(raised, LLMFailure) and "LLM oversized" in str(raised) and "5000 characters" in str(raised)
    assert client.usage.failures == {"oversized": 1} and client.usage.completion_tokens == 20
    huge_args = scripted.reply(scripted.tool_call("apply_edit", {"path": "m.py", "search": "x", "replace": "y" * 3000}))
    client, raised, _ = _chat([huge_args], max_reply_chars=1000)
    assert isinstance(raised, LLMFailure) and "LLM oversized" in str(raised)
    # a body far over the cap is refused while it is read, not after
    client, raised, _ = _chat([scripted.huge(300_000)], max_reply_chars=1000)
    assert isinstance(raised, LLMFailure) and "LLM oversized" in str(raised) and "bytes" in str(raised)
    assert client.usage.failures == {"oversized": 1}


def test_a_server_that_never_answers_ends_after_its_retries():
    client, raised, took = _chat([scripted.hang(30)] * 3, request_timeout_s=0.5, max_retries=1)
    assert isinstance(raised, LLMFailure) and raised.status == "failed_llm" and "LLM timeout" in str(raised)
    assert client.usage.calls == 2 and client.usage.retries == 1 and client.usage.failures == {"timeout": 2}
    assert took < 20  # two 0.5 s timeouts, never 2 x 60 s


def test_a_server_trickling_its_reply_is_a_timeout_not_a_wait_per_byte():
    # 120 bytes at 0.2 s each is 24 s, every read well within httpx's per-read timeout: the request's
    # own deadline stops it
    client, raised, took = _chat([scripted.trickle(0.2)] * 2, request_timeout_s=1.0, max_retries=1)
    assert isinstance(raised, LLMFailure) and "LLM timeout" in str(raised)
    assert client.usage.failures == {"timeout": 2} and took < 10


def test_the_wall_budget_bounds_a_hanging_server_not_retries_x_timeout():
    # 10 retries of a 20 s timeout would be minutes; the 2 s LLM wall budget caps each request
    client, raised, took = _chat([scripted.hang(30)] * 12, request_timeout_s=20, max_retries=10, max_wall_s=2)
    assert isinstance(raised, BudgetExhausted) and raised.status == "failed_budget"
    assert "wall-time budget" in str(raised) and "timeout" in str(raised)
    assert client.usage.failures.get("timeout", 0) >= 1
    assert took < 15


@pytest.mark.parametrize(("status", "kind"), [(429, "rate_limited"), (503, "server_error")])
def test_429_and_5xx_end_failed_llm_after_the_retries(status, kind):
    sleeps: list[float] = []
    client, raised, _ = _chat([scripted.error(status)] * 4, sleeps, max_retries=2, backoff_s=0.25)
    assert isinstance(raised, LLMFailure) and f"LLM {kind}" in str(raised) and "after 2 retries" in str(raised)
    assert client.usage.calls == 3 and client.usage.failures == {kind: 3} and sleeps == [0.25, 0.5]


def test_a_refused_connection_is_retried_then_failed_llm():
    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    sleeps: list[float] = []
    client = ChatClient(_cfg(f"http://127.0.0.1:{port}/v1", max_retries=1), sleep=sleeps.append)
    with pytest.raises(LLMFailure, match="LLM connection") as info:
        client.chat(MSGS, tool_schemas())
    assert info.value.status == "failed_llm" and client.usage.failures == {"connection": 2} and len(sleeps) == 1


def test_retry_after_is_honoured_in_seconds_and_as_an_http_date():
    sleeps: list[float] = []
    ok = scripted.reply(content="fine")
    client, raised, _ = _chat([scripted.error(429, retry_after=3), ok], sleeps, backoff_s=0.5)
    assert raised is None and sleeps == [3.0] and client.usage.retries == 1
    sleeps.clear()
    date = email.utils.formatdate(time.time() + 20, usegmt=True)
    _, raised, _ = _chat([scripted.error(503, retry_after=date), ok], sleeps, backoff_s=0.5)
    assert raised is None and len(sleeps) == 1 and 15 < sleeps[0] <= 21
    assert retry_after_s({"retry-after": "soon"}) is None and retry_after_s({"retry-after-ms": "1500"}) == 1.5


def test_a_retry_after_beyond_the_wall_budget_ends_at_once():
    sleeps: list[float] = []
    client, raised, took = _chat([scripted.error(429, retry_after=600)], sleeps, max_wall_s=30)
    assert isinstance(raised, BudgetExhausted) and "Retry-After" in str(raised) and "rate_limited" in str(raised)
    assert sleeps == [] and took < 10 and client.usage.failures == {"rate_limited": 1}


def test_backoff_is_capped_by_the_wall_budget_left():
    sleeps: list[float] = []
    _, raised, _ = _chat([scripted.error(500)] * 3, sleeps, backoff_s=50, max_wall_s=5)
    assert isinstance(raised, BudgetExhausted) and "backoff" in str(raised) and sleeps == []


def test_unknown_tool_calls_end_failed_llm_after_max_malformed(tmp_path):
    (tmp_path / "m.py").write_text(SRC)
    session = EditSession(tmp_path, tmp_path, {}, lambda *a: pytest.fail("no runs expected"), None, "python m.py", None)
    diag = Diagnosis(phase="run", kind="other", exc_type="TypeError", message="float64",
                     frames=[UserFrame(file="m.py", line=5, function="metric")])
    script = [scripted.reply(scripted.tool_call("no_such_tool", {}, f"c{i}")) for i in range(6)]
    with scripted.ScriptedLLM(script) as server, pytest.raises(LLMFailure) as info:
        client = ChatClient(_cfg(server.base_url, max_malformed=2))
        run_fixer(client, session, diag, [])
    assert info.value.status == "failed_llm" and "LLM tool_call" in str(info.value)
    assert "unknown tool 'no_such_tool'" in str(info.value)
    assert len(server.requests) == 3 and client.usage.failures == {"tool_call": 3}
    # the model was told each time what was wrong
    assert "unknown tool" in server.requests[1]["body"]["messages"][-1]["content"]


def test_usage_counters_survive_the_state_reducer():
    a = Usage(calls=2, prompt_tokens=10, retries=1, failures={"timeout": 2}).as_counters()
    b = Usage(calls=1, completion_tokens=5, failures={"timeout": 1, "non_json": 1}).as_counters()
    total = Usage.of_counters(add_counters(add_counters({}, a), b))
    assert (total.calls, total.tokens, total.retries) == (3, 15, 1)
    assert total.failures == {"timeout": 3, "non_json": 1}


def test_limits_come_from_flags_then_environment_then_defaults():
    env = {"FERRY_LLM_TIMEOUT_S": "5", "FERRY_LLM_RETRIES": "2", "FERRY_LLM_MAX_WALL_S": "120"}
    limits = resolve_limits({"request_timeout_s": 3.0, "max_retries": None}, env)
    assert (limits.request_timeout_s, limits.max_retries, limits.max_wall_s) == (3.0, 2, 120.0)
    assert limits.backoff_s == DEFAULTS.backoff_s and DEFAULTS.request_timeout_s == 60.0
    for flags, environ, named in [({"max_retries": -1}, {}, "--llm-retries"),
                                  ({}, {"FERRY_LLM_TIMEOUT_S": "soon"}, "$FERRY_LLM_TIMEOUT_S"),
                                  ({}, {"FERRY_LLM_MAX_WALL_S": "inf"}, "$FERRY_LLM_MAX_WALL_S"),
                                  ({"max_reply_chars": 0}, {}, "--llm-max-reply-chars")]:
        with pytest.raises(ValueError, match=named.replace("$", r"\$")):
            resolve_limits(flags, environ)


def test_a_bad_limit_is_a_cli_error(tmp_path):
    (tmp_path / "p.py").write_text("print(1)\n")
    env = {**os.environ, "FERRY_LLM_RETRIES": "many"}
    res = subprocess.run([sys.executable, "-m", "agent.cli", "migrate", str(tmp_path), "--run", "python p.py",
                          "--offline", "--llm-timeout", "0", "--state-dir", str(tmp_path / "s")],
                         cwd=ROOT, capture_output=True, text=True, timeout=120, env=env)
    assert res.returncode == 2 and "--llm-timeout" in res.stderr and "must be a finite number above 0" in res.stderr
    res = subprocess.run([sys.executable, "-m", "agent.cli", "migrate", str(tmp_path), "--run", "python p.py",
                          "--offline", "--state-dir", str(tmp_path / "s")],
                         cwd=ROOT, capture_output=True, text=True, timeout=120, env=env)
    assert res.returncode == 2 and "$FERRY_LLM_RETRIES" in res.stderr


# The CPU tensor hidden in a dict defeats the offline rules (tests/agent/test_llm_graph.py), so the model is asked.
PROG = '''import torch

device = torch.device("cuda")
table = {"w": torch.full((3,), 2.0)}


def main():
    x = torch.ones(3, device=device)
    print(f"loss {(x * table['w']).sum().item():.4f}")


main()
'''


@pytest.mark.slow
def test_a_non_json_reply_ends_the_migration_failed_llm_with_the_call_counted(tmp_path):
    repo = tmp_path / "repo"
    repo.mkdir()
    (repo / "prog.py").write_text(PROG)
    env = {**os.environ, "FERRY_LLM_API_KEY": "k", "FERRY_LLM_TIMEOUT_S": "5"}
    with scripted.ScriptedLLM([scripted.raw(b"<html>gateway</html>", content_type="text/html")]) as server:
        res = subprocess.run(
            [sys.executable, "-m", "agent.cli", "migrate", str(repo), "--run", "python prog.py", "--llm",
             "--llm-base-url", server.base_url, "--llm-model", "scripted", "--json",
             "--state-dir", str(tmp_path / "state"), "--out", str(tmp_path / "out")],
            cwd=ROOT, capture_output=True, text=True, timeout=600, env=env)
    result = json.loads(res.stdout)
    assert result["status"] == "failed_llm", result.get("summary")
    assert "LLM non_json" in result["summary"]
    # the plan's call (no plan scripted: the server refuses it with HTTP 400, the offline plan runs) and the fixer's
    assert result["llm"]["calls"] == 2 and result["llm"]["failures"] == {"http_error": 1, "non_json": 1}
    assert result["llm"]["model"] == "scripted" and result["llm"]["cost_usd"] == 0.0  # no tokens were billed
    report = (tmp_path / "out" / "report.md").read_text()
    assert "model `scripted`: 2 calls" in report and "non_json 1" in report


def test_migrate_stores_the_limits_flags_over_environment(tmp_path, monkeypatch):
    import argparse

    from agent.cli import migrate_cmd

    (tmp_path / "repo").mkdir()
    monkeypatch.setenv("FERRY_LLM_TIMEOUT_S", "7")
    monkeypatch.setenv("FERRY_LLM_MAX_WALL_S", "45")
    monkeypatch.setenv("FERRY_LLM_RETRIES", "1")
    parser = argparse.ArgumentParser()
    migrate_cmd.add_arguments(parser)
    args = parser.parse_args([str(tmp_path / "repo"), "--run", "python p.py", "--offline", "--llm-retries", "6",
                              "--llm-max-reply-chars", "5000", "--state-dir", str(tmp_path / "s")])
    limits = migrate_cmd.build_options(args).llm_limits
    assert (limits.request_timeout_s, limits.max_wall_s, limits.max_retries, limits.max_reply_chars) == (7, 45, 6, 5000)
    assert limits.max_calls == DEFAULTS.max_calls
