"""FRY010 (runtime.device-index): torch.cuda.set_device/current_device ->
torch.accelerator.set_device_index/current_device_index (including LOCAL_RANK-based set_device,
entry 38)."""

from __future__ import annotations

from tools.codemods.generic import CallMapRule
from tools.codemods.tables import DEVICE_INDEX_CALLS


class DeviceIndex(CallMapRule):
    ID = "FRY010"
    NAME = "runtime.device-index"
    DESCRIPTION = ("torch.cuda.set_device/current_device -> torch.accelerator.set_device_index/current_device_index "
                   "(including LOCAL_RANK-based set_device, entry 38).")
    CATEGORY = "auto"
    ENTRIES = (10,)
    CALLS = DEVICE_INDEX_CALLS


RULE = DeviceIndex
