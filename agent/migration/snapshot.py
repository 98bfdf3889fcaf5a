"""The typed views of a migration's state its callers get: :class:`MigrationSnapshot` (what the façade's
``start / resume / load`` return) and :class:`NodeUpdate` (what a progress callback gets after each node).

Both read the checkpointed values through :mod:`agent.migration.state`'s readers; nothing outside
``agent.migration`` reads the state by key.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

from pydantic import BaseModel, ConfigDict, ValidationError

from agent.errors import Status
from agent.migration.options import MigrationOptions
from agent.migration.records import Edit, Outputs, Plan, RunRecord, ScanDigest, Step
from agent.migration.state import (
    edits_of,
    elapsed_of,
    files_of,
    iteration_of,
    llm_counters_of,
    migration_id_of,
    options_of,
    outputs_of,
    parity_of,
    plan_of,
    profile_error_of,
    profile_of,
    runs_of,
    scan_of,
    status_of,
    steps_of,
    summary_of,
    workspace_of,
)
from tools.parity.models import ParityReport
from tools.profile.models import ProfileReport

logger = logging.getLogger(__name__)

__all__ = ["INTERRUPT", "ApprovalRequest", "MigrationSnapshot", "NodeUpdate", "ProgressFn", "StateView",
           "approval_requests"]

#: the node name a progress callback gets when the graph stops to ask for approval
INTERRUPT = "__interrupt__"


class ApprovalRequest(BaseModel):
    """A question the graph waits on (``--approve``): the edit it proposes and how to answer."""

    model_config = ConfigDict(extra="allow", frozen=True)

    type: str = "approve_edit"
    rule: str | None = None
    kind: str | None = None
    site: str | None = None
    reason: str | None = None
    diff: str | None = None
    how: str | None = None

    def data(self) -> dict[str, Any]:
        """The question as JSON (``--json``, the service's events), every key it was asked with."""
        return self.model_dump(mode="json")


def approval_requests(values: object) -> list[ApprovalRequest]:
    """The questions among LangGraph's interrupt values (anything else is logged and left out)."""
    out: list[ApprovalRequest] = []
    for value in values if isinstance(values, list | tuple) else []:
        try:
            out.append(ApprovalRequest.model_validate(value))
        except ValidationError:
            logger.warning("an interrupt that is no approval request is left out: %r", value)
    return out


@dataclass(frozen=True)
class StateView:
    """Typed reads of a migration state, or of one node's partial update of it (absent: None, 0 or empty)."""

    values: Mapping[str, Any] = field(default_factory=dict, repr=False)

    @property
    def migration_id(self) -> str | None:
        return migration_id_of(self.values) if "migration_id" in self.values else None

    @property
    def workspace(self) -> str | None:
        """The private copy the target runs use (rebuilt from the source and ``files`` when lost)."""
        return workspace_of(self.values)

    @property
    def status(self) -> Status | None:
        return status_of(self.values)

    @property
    def summary(self) -> str | None:
        return summary_of(self.values)

    @property
    def iteration(self) -> int:
        return iteration_of(self.values)

    @property
    def elapsed_s(self) -> float:
        return elapsed_of(self.values)

    @property
    def files(self) -> dict[str, str]:
        """Repository path -> the text the migration gave it (every file it changed)."""
        return dict(files_of(self.values))

    @property
    def llm_usage(self) -> dict[str, float]:
        return dict(llm_counters_of(self.values))

    @property
    def llm_calls(self) -> int:
        return int(self.llm_usage.get("calls", 0))

    @property
    def llm_tokens(self) -> int:
        usage = self.llm_usage
        return int(usage.get("prompt_tokens", 0) + usage.get("completion_tokens", 0))

    @property
    def profile_error(self) -> str | None:
        return profile_error_of(self.values)

    @cached_property
    def edits(self) -> list[Edit]:
        return edits_of(self.values)

    @cached_property
    def steps(self) -> list[Step]:
        return steps_of(self.values)

    @cached_property
    def runs(self) -> list[RunRecord]:
        return runs_of(self.values)

    @cached_property
    def outputs(self) -> Outputs | None:
        return outputs_of(self.values)

    @cached_property
    def plan(self) -> Plan | None:
        return plan_of(self.values)

    @cached_property
    def scan(self) -> ScanDigest | None:
        return scan_of(self.values)

    @cached_property
    def parity(self) -> ParityReport | None:
        return parity_of(self.values)

    @cached_property
    def profile(self) -> ProfileReport | None:
        return profile_of(self.values)


@dataclass(frozen=True)
class NodeUpdate(StateView):
    """What one node wrote (its partial update), or, for :data:`INTERRUPT`, the questions it asks."""

    interrupts: list[ApprovalRequest] = field(default_factory=list)


@dataclass(frozen=True)
class MigrationSnapshot(StateView):
    """A migration's saved state, with ``pending`` (the nodes still to run or finish) and ``interrupts``
    (the questions it waits on)."""

    pending: list[str] = field(default_factory=list)
    interrupts: list[ApprovalRequest] = field(default_factory=list)

    @cached_property
    def options(self) -> MigrationOptions:
        return options_of(self.values)

    @property
    def waiting(self) -> bool:
        """It waits for an answer to ``interrupts[0]`` (``resume(..., answer=...)``)."""
        return bool(self.interrupts)

    @property
    def finished(self) -> bool:
        """It ended (a status), nothing left to run or answer."""
        return not self.pending and not self.interrupts


#: a progress callback: the node that finished and its update (INTERRUPT: the questions, in ``interrupts``)
ProgressFn = Callable[[str, NodeUpdate], None]
