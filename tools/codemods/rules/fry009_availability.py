"""FRY009 (runtime.availability): torch.cuda.is_available()/device_count() ->
torch.accelerator.is_available()/device_count()."""

from __future__ import annotations

from tools.codemods.generic import CallMapRule
from tools.codemods.tables import AVAILABILITY_CALLS


class Availability(CallMapRule):
    ID = "FRY009"
    NAME = "runtime.availability"
    DESCRIPTION = "torch.cuda.is_available()/device_count() -> torch.accelerator.is_available()/device_count()."
    CATEGORY = "auto"
    ENTRIES = (9,)
    CALLS = AVAILABILITY_CALLS


RULE = Availability
