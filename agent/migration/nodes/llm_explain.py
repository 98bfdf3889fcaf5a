"""llm_explain: under --llm, an environment failure (``failed_environment``: a module or tool the runs'
interpreter lacks, a distributed job that cannot start) is explained by the model; nothing else.

The model gets the deterministic finding (agent/migration/environment.py's message, with the exact command
that installs what is missing), the failing run's error and the run command, and no tools: it cannot
run, edit or install anything, and nothing it answers is executed. Its answer is appended to the
summary, marked as the model's; the status stays ``failed_environment``. A model failure (server
down, budget, a malformed reply) is logged and noted in the summary; it never changes the status.
"""

from __future__ import annotations

import logging
from typing import Any

from agent.errors import FerryAgentError
from agent.migration.nodes.common import SUMMARY, Update, step
from agent.migration.runs import RunScheduler
from agent.migration.state import MigrationState, last_run, options_of, reference_of, summary_of

logger = logging.getLogger(__name__)

SYSTEM = """You are Ferry's assistant. Ferry migrates PyTorch CUDA programs to the `tpx` accelerator and runs them \
in a sandbox. A run failed because of the user's ENVIRONMENT (a package or tool missing from the interpreter \
the runs use, or a distributed job that could not start), not because of the code. Explain in a few sentences, \
for the user, what is missing and why, and what they should check. Do not propose code edits. Ferry has already \
computed the exact command that fixes it: repeat that command verbatim if you mention one; do not invent others."""

MARK = "The model's explanation (from the model, not verified by Ferry)"
MAX_ANSWER = 2000


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


@step("llm_explain")
def llm_explain(state: MigrationState, runs: RunScheduler) -> Update:
    from agent.llm.client import ChatClient
    from agent.migration.nodes.llm_fix import model_client

    summary = summary_of(state) or ""
    messages: list[dict[str, Any]] = [{"role": "system", "content": SYSTEM},
                                      {"role": "user", "content": explanation_prompt(state)}]
    client: ChatClient | None = None
    try:
        client = model_client(state)
        msg = client.chat(messages, None)  # no tools: the model can neither run nor install anything
        answer = " ".join((getattr(msg, "content", None) or "").split())[:MAX_ANSWER]
        if not answer:
            raise FerryAgentError("the model's answer was empty")
    except Exception as exc:  # the explanation is optional: no failure of the model's may change the status
        logger.warning("llm_explain: the model could not explain the environment failure: %s: %s",
                       type(exc).__name__, exc)
        usage = client.counters() if client is not None else {}
        note = f" (The model was asked to explain this failure but could not answer: {exc}; the status stands.)"
        return {"summary": summary + note, "llm_usage": usage, SUMMARY: f"the model could not explain it: {exc}"}
    return {"summary": f"{summary}\n\n{MARK}: {answer}", "llm_usage": client.counters(),
            SUMMARY: f"the model explained the environment failure ({client.usage.calls} calls)"}
