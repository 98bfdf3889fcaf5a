"""One error hierarchy for the migration agent, and the named statuses a migration ends with.

Two families:

* :class:`FixableError` — something the fixer (a rule or the model) did wrong and can try again:
  an edit that does not apply or does not parse, a malformed tool call. They go back to the
  fixer with the message, within a retry budget.
* :class:`TerminalError` — budget, timeout, sandbox, missing tool: the migration ends with the
  error's named :attr:`status`, which evals count.
"""

from __future__ import annotations

from typing import Literal, get_args

Status = Literal[
    "migrated",  # target run + tests pass on tpx, parity passes
    "partial",  # runs on tpx but parity or tests failed and nothing left to try automatically
    "needs_llm",  # no offline rule applies; a model could try (run again with --llm)
    "needs_human",  # a decision only a person can take (OOM figures, original does not run, ...)
    "rejected",  # a person rejected a proposed edit under --approve
    "guard_refused",  # an edit would weaken the tests (the test guard, docs/guard.md) and no one approved it
    "failed_budget",  # iteration, LLM call, token or wall-time budget exhausted
    "failed_timeout",  # a run hit its wall-clock limit
    "failed_sandbox",  # the sandbox could not run the command at all
    "failed_tool_unavailable",  # a tool the graph needs is not installed / importable
    "failed_environment",  # the user's code needs a package the runs' interpreter lacks (named, with the fix)
    "failed_llm",  # the model server failed after retries, or the model kept misbehaving
    "failed_output",  # the migration ended but its patch/report could not be written where asked
    "failed_internal",  # a bug in Ferry itself (an exception the graph did not expect)
]

STATUSES: tuple[str, ...] = get_args(Status)


class FerryAgentError(Exception):
    """Base of every error the agent raises on purpose."""

    status: Status = "failed_internal"

    def __init__(self, message: str, *, status: Status | None = None) -> None:
        super().__init__(message)
        if status is not None:
            self.status = status

    @property
    def message(self) -> str:
        return str(self)


# --- errors the fixer can fix -------------------------------------------------------------


class FixableError(FerryAgentError):
    """The fixer's attempt was wrong; tell it why and let it try again (within its budget)."""

    status: Status = "partial"


class EditRejected(FixableError):
    """An edit could not be applied: search text not found, ambiguous, or the result does not parse."""


class ToolCallError(FixableError):
    """A tool call was malformed: unknown tool, arguments not JSON, or failing validation."""


# --- errors that end the migration ----------------------------------------------------------


class TerminalError(FerryAgentError):
    """The migration cannot go on; it ends with :attr:`status`."""


class BudgetExhausted(TerminalError):
    status: Status = "failed_budget"


class RunTimedOut(TerminalError):
    status: Status = "failed_timeout"


class SandboxFailure(TerminalError):
    status: Status = "failed_sandbox"


class ToolUnavailable(TerminalError):
    """A tool package (runner, scan, parity, profile) is not importable in this installation."""

    status: Status = "failed_tool_unavailable"


class LLMFailure(TerminalError):
    """The model server kept failing (after retries) or is not configured."""

    status: Status = "failed_llm"


class EnvironmentMissing(TerminalError):
    """The program needs something its runs' interpreter does not have (a package): not the code's
    fault and nothing a fix of the code can mend."""

    status: Status = "failed_environment"


class GuardRefused(TerminalError):
    """An edit removes, skips or loosens a test, swallows its failure or changes its collection (the test
    guard, ``tools.guard``), and the user did not approve it."""

    status: Status = "guard_refused"


class NeedsHuman(TerminalError):
    status: Status = "needs_human"
