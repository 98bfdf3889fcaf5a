"""FRY012 (runtime.device-properties): get_device_name/get_device_properties ->
torch.get_device_module(device).*; get_device_capability (capability branches) -> review."""

from __future__ import annotations

from tools.codemods.generic import CallMapRule
from tools.codemods.tables import DEVICE_PROPERTY_CALLS


class DeviceProperties(CallMapRule):
    ID = "FRY012"
    NAME = "runtime.device-properties"
    DESCRIPTION = ("get_device_name/get_device_properties -> torch.get_device_module(device).*; get_device_capability "
                   "(capability branches) -> review.")
    CATEGORY = "auto"
    ENTRIES = (12,)
    CALLS = DEVICE_PROPERTY_CALLS


RULE = DeviceProperties
