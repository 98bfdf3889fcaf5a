"""The target device choices (``--device``) and what the module's device variable is set to for each.

Data only, imported by both the rule base (:mod:`tools.codemods.base`) and the device-variable
search (:mod:`tools.codemods.device`), so neither imports the other for it.
"""

from __future__ import annotations

from typing import Literal

DeviceMode = Literal["accelerator", "tpx"]

#: what the device variable is set to, per ``--device`` choice
DEVICE_EXPRESSIONS: dict[str, str] = {
    "accelerator": 'torch.accelerator.current_accelerator(check_available=True) or torch.device("cpu")',
    "tpx": 'torch.device("tpx")',
}


def device_expression(mode: DeviceMode) -> str:
    return DEVICE_EXPRESSIONS[mode]
