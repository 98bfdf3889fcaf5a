"""What the user asked a migration for (:class:`MigrationOptions`) and the one function that builds it.

The CLI (``ferry migrate``, and through it the eval harness), the service's workers and ``ferry pr`` /
the PR bot all build their options with :func:`options_for`, so that a value none of them gives gets the
same default everywhere. The options are stored in the checkpointed state as JSON (``state.dump``):
a checkpoint written before the model's limits were nested (seven flat ``llm_*`` keys) still loads.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any, Literal

from pydantic import BaseModel, Field, model_validator

from agent.settings import COST_ENV, LLMLimits, parse_max_cost, resolve_limits, settings

#: the flat keys older checkpoints hold -> the field of LLMLimits each one is now
LEGACY_LLM_KEYS: dict[str, str] = {
    "llm_timeout_s": "request_timeout_s", "llm_retries": "max_retries", "llm_backoff_s": "backoff_s",
    "llm_max_wall_s": "max_wall_s", "llm_max_calls": "max_calls", "llm_max_tokens": "max_tokens",
    "llm_max_reply_chars": "max_reply_chars",
}


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
    skip_rules: list[str] = Field(default_factory=list, description=(
        "rule ids the user asked to leave out: no codemod or policy rule with one of these ids edits anything"))
    max_iterations: int = Field(default=8, ge=0, description="fix/verify rounds before failed_budget")
    run_timeout_s: float = Field(default=600.0, gt=0)
    max_wall_s: float | None = Field(default=None, gt=0, description=(
        "the migration's wall-time budget: runs are capped by what is left, and one that cannot finish in it "
        "is not started (failed_budget); None: no budget"))
    seed: int = 0
    disk_limit_bytes: int | None = Field(default=None, ge=1024**2,
                                         description="disk cap of each run, in all (None: $FERRY_DISK_LIMIT or "
                                                     "what the host can back)")
    llm_limits: LLMLimits = Field(default_factory=LLMLimits, description=(
        "the model's limits (flags, else FERRY_LLM_*, else LLMLimits' defaults)"))
    llm_model: str | None = None
    llm_base_url: str | None = None
    llm_max_cost: float | Literal["none"] | None = Field(default=None, description=(
        "the cost cap in US dollars (--llm-max-cost); 'none': no cap in money; None: none given"))
    # The user's own environment, for every run (reference, target, tests, profile): --python, --env, --cwd.
    python: str | None = Field(default=None, description="the runs' interpreter (None: Ferry's own)")
    env: dict[str, str] = Field(default_factory=dict, description="the user's own variables for every run")
    cwd: str | None = Field(default=None, description="where every run starts, relative to the repository")
    coverage: bool = Field(default=False, description=(
        "measure line coverage in the tests before and after (also where the repository configures coverage; "
        "the test guard, docs/guard.md)"))
    explain_drift: bool = Field(default=False, description=(
        "when parity passes by the drift budget, measure where the drift comes from in side runs at once "
        "(without it they are made only if the tests then fail: they cannot change a passing verdict)"))

    @model_validator(mode="before")
    @classmethod
    def _nest_flat_llm_limits(cls, data: Any) -> Any:
        """Options saved with the seven flat ``llm_*`` keys (checkpoints from before ``llm_limits``)."""
        if not isinstance(data, Mapping) or not any(key in data for key in LEGACY_LLM_KEYS):
            return data
        out = {key: value for key, value in data.items() if key not in LEGACY_LLM_KEYS}
        flat = {field: data[key] for key, field in LEGACY_LLM_KEYS.items() if key in data}
        nested = out.get("llm_limits")
        nested = nested.model_dump() if isinstance(nested, LLMLimits) else dict(nested or {})
        out["llm_limits"] = {**flat, **nested}
        return out


def options_for(*, source: str, run_command: str, state_dir: str, test_command: str | None = None,
                out_dir: str | None = None, llm: bool | None = None, approve: bool = False, apply: bool = False,
                device: str = "accelerator", skip_rules: Iterable[str] = (), max_iterations: int = 8,
                run_timeout_s: float = 600.0, max_wall_s: float | None = None, seed: int = 0,
                disk_limit_bytes: int | None = None, llm_limits: LLMLimits | None = None,
                llm_model: str | None = None, llm_base_url: str | None = None, python: str | None = None,
                env: Mapping[str, str] | None = None, cwd: str | None = None,
                llm_max_cost: float | Literal["none"] | None = None, coverage: bool = False,
                explain_drift: bool = False) -> MigrationOptions:
    """The options of a new migration, every caller's: what it was not given gets the same default.

    ``llm``: None uses the model when the environment names one (``agent.settings``: ``settings().llm.configured()``);
    ``llm_limits``: None takes FERRY_LLM_* else the defaults (a bad variable is a ValueError naming it).
    """
    return MigrationOptions(
        source=source, run_command=run_command, test_command=test_command, out_dir=out_dir,
        state_dir=state_dir, llm=settings().llm.configured() if llm is None else llm, approve=approve, apply=apply,
        device=device, skip_rules=list(skip_rules), max_iterations=max_iterations, run_timeout_s=run_timeout_s,
        max_wall_s=max_wall_s, seed=seed, disk_limit_bytes=disk_limit_bytes,
        llm_limits=resolve_limits({}) if llm_limits is None else llm_limits, llm_model=llm_model,
        llm_base_url=llm_base_url, python=python, env=dict(env or {}), cwd=cwd, coverage=coverage,
        explain_drift=explain_drift,
        llm_max_cost=env_max_cost() if llm_max_cost is None else llm_max_cost)


def env_max_cost() -> float | Literal["none"] | None:
    """``$FERRY_LLM_MAX_COST_USD`` checked (None: not set); a bad value is a ValueError naming it."""
    text = settings().llm.max_cost_usd
    return None if text is None else parse_max_cost(text, f"${COST_ENV}")
