"""The model's free-text answers: an environment failure explained (the ``llm_explain`` node) and the
reply to a user's message in a migration session's chat (:mod:`agent.chat.model_replies`).

Both are one chat call; what the model is told is assembled here, its instructions are in
:mod:`agent.llm.prompts`.
"""

from __future__ import annotations

from typing import Any

from agent.errors import FerryAgentError
from agent.llm.client import ChatClient, Reply
from agent.llm.prompts import CHAT_SYSTEM, ENVIRONMENT_SYSTEM
from agent.migration.state import MigrationState, last_run, options_of, reference_of, summary_of

MAX_EXPLANATION = 2000  # characters of the model's explanation kept


def explanation_prompt(state: MigrationState) -> str:
    """What the model is told: the deterministic finding with its exact command, and the failing run's error."""
    opts = options_of(state)
    run = last_run(state) or reference_of(state)
    parts = [f"Ferry's finding (deterministic): {summary_of(state) or ''}", f"Run command: {opts.run_command}"]
    if opts.test_command:
        parts.append(f"Test command: {opts.test_command}")
    if opts.python:
        parts.append(f"Interpreter the runs use (--python): {opts.python}")
    if run is not None:
        if run.trace is not None:
            parts.append(f"The run's error: {run.trace.exc_type}: {run.trace.message[:1500]}")
        tail = (run.stderr_tail or run.error or "")[-1500:]
        if tail:
            parts.append(f"The end of the run's stderr:\n{tail}")
    return "\n\n".join(parts)


def explain_environment(client: ChatClient, state: MigrationState) -> str:
    """The model's explanation of the environment failure, on one line (at most ``MAX_EXPLANATION``
    characters); an empty answer raises ``FerryAgentError``. No tools: the model can neither run nor
    install anything."""
    messages: list[dict[str, Any]] = [{"role": "system", "content": ENVIRONMENT_SYSTEM},
                                      {"role": "user", "content": explanation_prompt(state)}]
    msg = client.chat(messages, None)
    answer = " ".join((getattr(msg, "content", None) or "").split())[:MAX_EXPLANATION]
    if not answer:
        raise FerryAgentError("the model's answer was empty")
    return answer


def chat_answer(client: ChatClient, facts: str, text: str, tools: list[dict[str, Any]]) -> Reply:
    """The model's reply to the user's message ``text`` in a session whose facts read ``facts``, the
    session's actions offered as ``tools``."""
    messages = [{"role": "system", "content": CHAT_SYSTEM + "\n\nSession facts:\n" + facts},
                {"role": "user", "content": text}]
    return client.chat(messages, tools)
