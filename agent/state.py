"""The migration's one typed state, with reducers on the fields that accumulate.

Everything in the state is plain JSON (dicts, lists, strings, numbers) so that LangGraph's
checkpointers (SQLite, Postgres) store it without custom serialisers, and a migration can be
resumed by another process. Edits are held as file contents (``files``: relative path -> the
text the workspace must hold), so a workspace lost in a crash is rebuilt from the original repo
plus ``files``.
"""

from __future__ import annotations

import logging
import operator
from typing import Annotated, Any, TypedDict

from pydantic import BaseModel, Field

logger = logging.getLogger(__name__)


def merge_files(left: dict[str, str] | None, right: dict[str, str] | None) -> dict[str, str]:
    """Later writes of a file win; other files are kept."""
    return {**(left or {}), **(right or {})}


def add_counters(left: dict[str, float] | None, right: dict[str, float] | None) -> dict[str, float]:
    """Sum counters key by key (LLM calls, tokens)."""
    out = dict(left or {})
    for key, value in (right or {}).items():
        out[key] = out.get(key, 0) + value
    return out


class MigrationOptions(BaseModel):
    """What the user asked for; stored in the state so that ``ferry resume`` needs only the id."""

    source: str = Field(description="the user's repository (never written unless apply=True)")
    run_command: str
    test_command: str | None = None
    out_dir: str | None = None
    state_dir: str
    llm: bool = False
    approve: bool = False
    apply: bool = False
    device: str = Field(default="accelerator", description="codemod target: accelerator or tpx")
    max_iterations: int = Field(default=8, ge=0, description="fix/verify rounds before failed_budget")
    run_timeout_s: float = Field(default=600.0, gt=0)
    disk_limit_bytes: int | None = Field(default=None, ge=1024**2,
                                         description="disk cap of every run, in all (None: $FERRY_DISK_LIMIT or 4 GiB)")
    seed: int = 0
    llm_max_calls: int = Field(default=30, ge=1)
    llm_max_tokens: int = Field(default=200_000, ge=1)
    llm_max_wall_s: float = Field(default=900.0, gt=0)
    llm_model: str | None = None
    llm_base_url: str | None = None


class MigrationState(TypedDict, total=False):
    migration_id: str
    options: dict[str, Any]  # MigrationOptions.model_dump()
    workspace: str | None  # the private copy the target runs use
    # Current text of every file the migration changed (relative path -> text).
    files: Annotated[dict[str, str], merge_files]
    # One entry per applied edit: step, kind (codemod/policy/llm/human), rule, file(s), diff, reason.
    edits: Annotated[list[dict[str, Any]], operator.add]
    # One entry per finished node: name, summary, seconds.
    steps: Annotated[list[dict[str, Any]], operator.add]
    # Every run (reference, target, test) in order, summarised.
    runs: Annotated[list[dict[str, Any]], operator.add]
    reference: dict[str, Any] | None  # the reference RunResult (JSON)
    scan: dict[str, Any] | None  # scan summary
    plan: dict[str, Any] | None
    last_run: dict[str, Any] | None  # the latest failing or final target/test RunResult (JSON)
    target_ok: dict[str, Any] | None  # the latest passing target run (probe/profile dirs)
    diagnosis: dict[str, Any] | None  # what failed, where, and the signature
    proposal: dict[str, Any] | None  # the next edit to apply (rule or model), with its diff
    # Keys "rule@file:line" of fixes already attempted (so a rule never loops on the same site).
    tried: Annotated[list[str], operator.add]
    iteration: int  # fix rounds applied
    parity: dict[str, Any] | None
    profile: dict[str, Any] | None
    llm_usage: Annotated[dict[str, float], add_counters]
    elapsed_s: Annotated[float, operator.add]
    status: str | None  # a named status from agent.errors.STATUSES once decided
    summary: str | None  # one paragraph: why the status, what is left for a human
    outputs: dict[str, str] | None  # paths written by the report node


def options_of(state: MigrationState) -> MigrationOptions:
    return MigrationOptions.model_validate(state["options"])
