"""Profiler settings from ``FERRY_PROFILE_*`` env vars."""

from __future__ import annotations

import os
from pathlib import Path

from pydantic import BaseModel, Field

from sandbox.envvars import env_enabled, env_int

DEFAULT_WARMUP = 1
DEFAULT_STEPS = 3


class ProfileConfig(BaseModel):
    out_dir: Path
    repo_root: Path = Field(description="source lines are reported for frames under this directory")
    warmup_steps: int = Field(DEFAULT_WARMUP, ge=0, description="steps skipped before the profiled window")
    steps: int = Field(DEFAULT_STEPS, ge=1, description="steps in the torch.profiler window")
    trace: bool = Field(True, description="export a Chrome/Perfetto trace of the window")
    track_syncs: bool = True


def config_from_env(env: dict[str, str] | None = None) -> ProfileConfig | None:
    env = dict(os.environ if env is None else env)
    out = env.get("FERRY_PROFILE_DIR")
    if not out:
        return None
    return ProfileConfig(
        out_dir=Path(out),
        repo_root=Path(env.get("FERRY_PROFILE_REPO_ROOT") or env.get("FERRY_WORKSPACE") or os.getcwd()),
        warmup_steps=env_int("FERRY_PROFILE_WARMUP", DEFAULT_WARMUP, env),
        steps=env_int("FERRY_PROFILE_STEPS", DEFAULT_STEPS, env),
        trace=env_enabled("FERRY_PROFILE_TRACE", env),
        track_syncs=env_enabled("FERRY_PROFILE_SYNCS", env),
    )
