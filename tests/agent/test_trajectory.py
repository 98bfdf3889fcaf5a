"""Trajectories (agent/llm/trajectory.py) and the cost cap in money (agent/llm/cost.py), in-process:
the scripted server on loopback with the real openai client."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from agent.errors import BudgetExhausted
from agent.llm import scripted
from agent.llm.client import ChatClient
from agent.llm.config import LLMConfig
from agent.llm.cost import COMPLETION_TOKENS_UNDER_CAP, CostCapReached, unpriced_problem
from agent.llm.trajectory import (
    FILE_NAME,
    Recorder,
    Scrubber,
    TrajectoryError,
    new_header,
    read_trajectory,
)
from agent.settings import parse_max_cost

PRICES = '[models."pricey"]\ninput_per_mtok = 0.0\noutput_per_mtok = 100.0\n'
MESSAGES = [{"role": "system", "content": "s"}, {"role": "user", "content": "fix it"}]


@pytest.fixture
def pricey(tmp_path, monkeypatch):
    table = tmp_path / "prices.toml"
    table.write_text(PRICES)
    monkeypatch.setenv("FERRY_LLM_PRICES", str(table))
    return table


def _client(server, tmp_path, cap=None, model="pricey"):
    header = new_header(model=model, base_url=server.base_url, migration_id="m1")
    recorder = Recorder(tmp_path / FILE_NAME, header, Scrubber(["sk-test-secret-0001"]), node="llm_fix")
    cfg = LLMConfig(model=model, base_url=server.base_url, api_key="sk-test-secret-0001", max_retries=0,
                    max_cost_usd=cap)
    return ChatClient(cfg, recorder=recorder)


def test_the_cap_stops_before_the_request_that_could_cross_it(tmp_path, pricey):
    # worst case of a request: 4096 completion tokens at $100/M = $0.4096; each reply spends 20 -> $0.002
    worst = COMPLETION_TOKENS_UNDER_CAP * 100 / 1e6
    cap = worst + 2 * 0.002 - 0.001  # room for two requests' spending, not three
    script = [scripted.reply(content="a"), scripted.reply(content="b"), scripted.reply(content="c")]
    with scripted.ScriptedLLM(script) as server:
        client = _client(server, tmp_path, cap=cap)
        client.chat(MESSAGES, None)
        client.chat(MESSAGES, None)
        with pytest.raises(CostCapReached) as info:
            client.chat(MESSAGES, None)
    assert len(server.requests) == 2  # not three: the third was never sent
    assert isinstance(info.value, BudgetExhausted) and info.value.status == "failed_budget"
    assert info.value.spent_usd == pytest.approx(0.004) and "$0.0040 spent" in str(info.value)
    # the worst case is what the request allows: max_completion_tokens is sent under a cap
    assert server.requests[0]["body"]["max_completion_tokens"] == COMPLETION_TOKENS_UNDER_CAP
    traj = read_trajectory(tmp_path / FILE_NAME)
    assert [e.kind for e in traj.events] == ["request", "reply", "request", "reply", "cost_cap"]
    assert traj.events[-1].spent_usd == pytest.approx(0.004)
    assert traj.events[1].cost_usd == pytest.approx(0.002)


def test_no_cap_sends_no_completion_limit(tmp_path, pricey):
    with scripted.ScriptedLLM([scripted.reply(content="a")]) as server:
        _client(server, tmp_path).chat(MESSAGES, None)
    assert "max_completion_tokens" not in server.requests[0]["body"]


def test_a_cap_on_an_unpriced_model_is_refused(tmp_path, pricey):
    from agent.errors import LLMFailure

    with scripted.ScriptedLLM([]) as server, pytest.raises(LLMFailure, match="cannot be held to a cost cap"):
        _client(server, tmp_path, cap=1.0, model="unpriced-x")


def test_unpriced_problem_and_the_cap_values():
    assert unpriced_problem("gpt-4o", None, True) is None
    assert unpriced_problem("x", "none", False) is None
    msg = unpriced_problem("x", None, False)
    assert msg and "--llm-max-cost none" in msg and "FERRY_LLM_PRICES" in msg
    assert parse_max_cost("2.5") == 2.5 and parse_max_cost("$1") == 1.0 and parse_max_cost("None") == "none"
    for bad in ("0", "-1", "nan", "inf", "lots"):
        with pytest.raises(ValueError, match="--llm-max-cost"):
            parse_max_cost(bad)


def test_the_trajectory_records_requests_replies_and_tool_calls_scrubbed(tmp_path, pricey, monkeypatch):
    monkeypatch.setenv("MY_SERVICE_TOKEN", "tok-very-secret-42")
    home = str(Path.home())
    messages = [{"role": "user", "content": f"key sk-test-secret-0001 at {home}/proj/prog.py, "
                                            "Authorization: Bearer abcdefghijkl, token tok-very-secret-42"}]
    call = scripted.tool_call("read_file", {"path": "prog.py"}, "c1")
    with scripted.ScriptedLLM([scripted.reply(call, prompt_tokens=7, completion_tokens=3)]) as server:
        client = _client(server, tmp_path)
        reply = client.chat(messages, [{"type": "function", "function": {"name": "read_file", "parameters": {}}}])
        client.record_tool(client.last_request, "c1", "read_file", reply.tool_calls[0].function.arguments or "",
                           "1: import torch", 0.01)
    text = (tmp_path / FILE_NAME).read_text()
    for secret in ("sk-test-secret-0001", "abcdefghijkl", "tok-very-secret-42"):
        assert secret not in text
    assert home not in text and "~/proj/prog.py" in text
    traj = read_trajectory(tmp_path / FILE_NAME)
    h = traj.header
    assert h.schema_version == 1 and h.model == "pricey" and h.base_url == server.base_url
    req, rep, tool = traj.events
    assert req.kind == "request" and req.n == 1 and req.node == "llm_fix" and req.tools == ["read_file"]
    assert rep.kind == "reply" and rep.prompt_tokens == 7 and rep.completion_tokens == 3
    assert rep.tool_calls[0].name == "read_file" and rep.wall_s >= 0
    assert tool.kind == "tool" and tool.n == 1 and tool.observation == "1: import torch"
    assert traj.tool_sequence() == ['read_file({"path": "prog.py"})']


def test_credentials_leave_the_base_url():
    h = new_header(model="m", base_url="https://user:pw@host.example:8443/v1?api-key=abc", migration_id=None)
    assert h.base_url == "https://host.example:8443/v1"


def _write(path: Path, lines: list[object]) -> Path:
    path.write_text("\n".join(x if isinstance(x, str) else json.dumps(x) for x in lines) + "\n")
    return path


HEADER = {"kind": "header", "schema_version": 1, "ferry_version": "0.1.0", "model": "m", "base_url": None,
          "started": "2026-01-01T00:00:00+00:00"}


@pytest.mark.parametrize(("lines", "expected"), [
    ([], "is empty"),
    ([{"kind": "request", "n": 1, "messages": []}], "line 1: the first line must be the header"),
    ([{**HEADER, "schema_version": 99}], "line 1: schema version 99"),
    ([HEADER, {"kind": "request", "n": 1, "messages": []}, "{not json"], "line 3: not JSON"),
    ([HEADER, {"kind": "reply", "n": 0}], "line 2: not an event of a trajectory"),
    ([HEADER, {"kind": "dance"}], "line 2: not an event"),
])
def test_a_bad_trajectory_names_its_line(tmp_path, lines, expected):
    path = _write(tmp_path / FILE_NAME, lines) if lines else tmp_path / FILE_NAME
    if not lines:
        path.write_text("")
    with pytest.raises(TrajectoryError, match=expected) as info:
        read_trajectory(path)
    assert str(path) in str(info.value)


def test_eval_compare_names_the_first_differing_tool_call(tmp_path):
    from evals.trajectories import tool_call_diff

    def run(name, calls):
        out = tmp_path / name
        out.mkdir()
        events = [HEADER, {"kind": "request", "n": 1, "messages": []},
                  {"kind": "reply", "n": 1, "tool_calls": [{"id": f"c{i}", "name": n, "arguments": a}
                                                           for i, (n, a) in enumerate(calls)]}]
        _write(out / FILE_NAME, events)
        return str(out)

    a = run("a", [("read_file", '{"path": "p.py"}'), ("apply_edit", '{"x": 1}'), ("finish", "{}")])
    b = run("b", [("read_file", '{"path": "p.py"}'), ("apply_diff", '{"d": 2}')])
    same = run("c", [("read_file", '{"path": "p.py"}'), ("apply_edit", '{"x": 1}'), ("finish", "{}")])
    diff = tool_call_diff("case", a, b)
    assert diff is not None and diff.index == 1 and diff.calls_before == 3 and diff.calls_after == 2
    assert diff.before == 'apply_edit({"x": 1})' and diff.after == 'apply_diff({"d": 2})'
    assert "from call 2" in diff.render()
    assert tool_call_diff("case", a, same) is None
    empty = tmp_path / "none"
    empty.mkdir()
    one_side = tool_call_diff("case", a, str(empty))
    assert one_side is not None and one_side.index is None and "one run only" in one_side.render()
    assert tool_call_diff("case", str(empty), str(empty)) is None


def test_a_migration_state_with_an_unpriced_model_and_no_cap_gets_no_client(tmp_path, pricey):
    """The service and `ferry pr` build their options without the CLI's check: the model's client refuses."""
    from agent.errors import LLMFailure
    from agent.llm.client import model_client
    from agent.migration.options import options_for

    def state(model, cap):
        opts = options_for(source=str(tmp_path), run_command="python p.py", state_dir=str(tmp_path / "s"),
                           llm=True, llm_model=model, llm_base_url="http://127.0.0.1:9/v1", llm_max_cost=cap)
        return {"migration_id": "m1", "options": opts.model_dump(mode="json")}

    with pytest.raises(LLMFailure, match="'nameless' has no price"):
        model_client(state("nameless", None))
    assert model_client(state("nameless", "none")).cfg.max_cost_usd is None
    assert model_client(state("pricey", 2.0)).cfg.max_cost_usd == 2.0
    assert model_client({**state("pricey", 2.0), "llm_cost_allowance_usd": 0.5}).cfg.max_cost_usd == 2.5


def test_the_service_approval_carries_an_amount_for_the_cost_question():
    from pydantic import ValidationError

    from agent.service.schemas import Approval

    assert Approval.model_validate({"action": "approve", "amount_usd": 2.5}).amount_usd == 2.5
    assert Approval.model_validate({"action": "approve"}).amount_usd is None
    for bad in (0, -1, float("inf")):
        with pytest.raises(ValidationError):
            Approval.model_validate({"action": "approve", "amount_usd": bad})
