"""Profiler settings from ``FERRY_PROFILE_*`` env vars (child side)."""

from __future__ import annotations

import os
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..guest import sibling

if TYPE_CHECKING:
    from sandbox.envvars import env_enabled, env_int
else:  # Ferry's sandbox.envvars (standard library only) under the root this code runs under
    _envvars = sibling("sandbox.envvars")
    env_enabled, env_int = _envvars.env_enabled, _envvars.env_int

DEFAULT_WARMUP = 1
DEFAULT_STEPS = 3


@dataclass
class ProfileConfig:
    """A dataclass, not a pydantic model: built inside the user's interpreter (standard library and
    torch only). A value out of its bounds is a ValueError naming it."""

    out_dir: Path
    repo_root: Path  # source lines are reported for frames under this directory
    warmup_steps: int = DEFAULT_WARMUP  # steps skipped before the profiled window
    steps: int = DEFAULT_STEPS  # steps in the torch.profiler window
    trace: bool = True  # export a Chrome/Perfetto trace of the window
    track_syncs: bool = True

    def __post_init__(self) -> None:
        self.out_dir, self.repo_root = Path(self.out_dir), Path(self.repo_root)
        for name, minimum in (("warmup_steps", 0), ("steps", 1)):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
                raise ValueError(f"profile setting {name}={value!r} is not an integer >= {minimum}")

    def as_json(self) -> dict[str, Any]:
        """The settings as JSON values (profile.json's ``config``)."""
        data = asdict(self)
        data.update(out_dir=str(self.out_dir), repo_root=str(self.repo_root))
        return data


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
