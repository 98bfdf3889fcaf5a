"""FRY023 (rng.state): torch.cuda.get_rng_state/set_rng_state -> torch.get_device_module(device) equivalents."""

from __future__ import annotations

from tools.codemods.generic import CallMapRule
from tools.codemods.tables import RNG_STATE_CALLS


class RngState(CallMapRule):
    ID = "FRY023"
    NAME = "rng.state"
    DESCRIPTION = "torch.cuda.get_rng_state/set_rng_state -> torch.get_device_module(device) equivalents."
    CATEGORY = "auto"
    ENTRIES = (23,)
    CALLS = RNG_STATE_CALLS


RULE = RngState
