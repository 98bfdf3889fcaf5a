"""FRY011 (runtime.device-context): `with torch.cuda.device(i)` -> `with torch.accelerator.device_index(i)`."""

from __future__ import annotations

from tools.codemods.generic import CallMapRule
from tools.codemods.tables import DEVICE_CONTEXT_CALLS


class DeviceContext(CallMapRule):
    ID = "FRY011"
    NAME = "runtime.device-context"
    DESCRIPTION = "`with torch.cuda.device(i)` -> `with torch.accelerator.device_index(i)`."
    CATEGORY = "auto"
    ENTRIES = (11,)
    CALLS = DEVICE_CONTEXT_CALLS


RULE = DeviceContext
