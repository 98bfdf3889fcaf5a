"""FRY022 (rng.manual-seed): torch.cuda.manual_seed(_all) -> torch.manual_seed (seeds every device)."""

from __future__ import annotations

from tools.codemods.generic import CallMapRule
from tools.codemods.tables import SEED_CALLS


class ManualSeed(CallMapRule):
    ID = "FRY022"
    NAME = "rng.manual-seed"
    DESCRIPTION = "torch.cuda.manual_seed(_all) -> torch.manual_seed (seeds every device)."
    CATEGORY = "auto"
    ENTRIES = (22,)
    CALLS = SEED_CALLS


RULE = ManualSeed
