"""The scripted OpenAI-compatible server on loopback lives in the package (``ferry replay`` serves from
it): :mod:`agent.llm.scripted`. The tests load it under this name."""

from agent.llm.scripted import (  # noqa: F401  (the tests' names for it)
    PLAN_TOOL,
    ScriptedLLM,
    error,
    hang,
    huge,
    no_choices,
    raw,
    reply,
    tool_call,
    trickle,
)
