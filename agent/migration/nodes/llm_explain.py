"""llm_explain: under --llm, an environment failure (``failed_environment``: a module or tool the runs'
interpreter lacks, a distributed job that cannot start) is explained by the model; nothing else.

The model gets the deterministic finding (agent/migration/environment.py's message, with the exact command
that installs what is missing), the failing run's error and the run command, and no tools: it cannot
run, edit or install anything, and nothing it answers is executed (the call and what it is told:
:mod:`agent.llm.answers`). Its answer is appended to the summary, marked as the model's; the status
stays ``failed_environment``. A model failure (server down, budget, a malformed reply) is logged and
noted in the summary; it never changes the status.
"""

from __future__ import annotations

import logging

from agent.migration.nodes.common import SUMMARY, Update, step
from agent.migration.runs import RunScheduler
from agent.migration.state import MigrationState, summary_of

logger = logging.getLogger(__name__)

MARK = "The model's explanation (from the model, not verified by Ferry)"


@step("llm_explain")
def llm_explain(state: MigrationState, runs: RunScheduler) -> Update:
    from agent.llm.answers import explain_environment
    from agent.llm.client import ChatClient, model_client

    summary = summary_of(state) or ""
    client: ChatClient | None = None
    try:
        client = model_client(state, "llm_explain")
        answer = explain_environment(client, state)
    except Exception as exc:  # the explanation is optional: no failure of the model's may change the status
        logger.warning("llm_explain: the model could not explain the environment failure: %s: %s",
                       type(exc).__name__, exc)
        usage = client.counters() if client is not None else {}
        note = f" (The model was asked to explain this failure but could not answer: {exc}; the status stands.)"
        return {"summary": summary + note, "llm_usage": usage, SUMMARY: f"the model could not explain it: {exc}"}
    return {"summary": f"{summary}\n\n{MARK}: {answer}", "llm_usage": client.counters(),
            SUMMARY: f"the model explained the environment failure ({client.usage.calls} calls)"}
