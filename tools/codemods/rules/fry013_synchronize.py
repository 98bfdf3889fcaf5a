"""FRY013 (runtime.synchronize): torch.cuda.synchronize() ->
torch.get_device_module(device).synchronize() (works on CPU too, unlike
torch.accelerator.synchronize())."""

from __future__ import annotations

from tools.codemods.generic import CallMapRule
from tools.codemods.tables import SYNC_CALLS


class Synchronize(CallMapRule):
    ID = "FRY013"
    NAME = "runtime.synchronize"
    DESCRIPTION = ("torch.cuda.synchronize() -> torch.get_device_module(device).synchronize() (works on CPU too, "
                   "unlike torch.accelerator.synchronize()).")
    CATEGORY = "auto"
    ENTRIES = (13,)
    CALLS = SYNC_CALLS


RULE = Synchronize
