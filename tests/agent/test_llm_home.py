"""Every model call and every instruction to a model lives in agent/llm/: the chat, the nodes and the
rest of agent/ call agent.llm, they neither hold prompts nor call a model client themselves."""

from __future__ import annotations

import ast
from pathlib import Path

AGENT = Path(__file__).resolve().parents[2] / "agent"
LLM = AGENT / "llm"


def _outside_llm() -> list[Path]:
    return [p for p in sorted(AGENT.rglob("*.py")) if LLM not in p.parents]


def test_no_model_call_outside_agent_llm():
    calls = []
    for path in _outside_llm():
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            # ChatClient.chat(messages, tools): the one way to call a model
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "chat" \
                    and len(node.args) == 2:
                calls.append(f"{path.relative_to(AGENT.parent)}:{node.lineno}")
    assert calls == []


def test_every_system_prompt_is_in_the_prompts_module():
    texts = []
    for path in sorted(AGENT.rglob("*.py")):
        if path == LLM / "prompts.py":
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and \
                    node.value.startswith(("You are Ferry's", "You are Ferry’s")):
                texts.append(f"{path.relative_to(AGENT.parent)}:{node.lineno}")
    assert texts == []
    from agent.llm import prompts

    assert {n for n in vars(prompts) if n.endswith("_SYSTEM")} == {
        "FIXER_SYSTEM", "PLANNER_SYSTEM", "ENVIRONMENT_SYSTEM", "CHAT_SYSTEM"}
