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

#: a device held as a string stays a string (catalogue entries 53): the target device's type name, per
#: ``--device`` choice ("cuda" on CUDA, "tpx" on tpx, "cpu" without an accelerator)
DEVICE_STRING_EXPRESSIONS: dict[str, str] = {
    "accelerator": 'torch.accelerator.current_accelerator().type if torch.accelerator.is_available() else "cpu"',
    "tpx": '"tpx"',
}


def device_string_expression(mode: DeviceMode, ordinal: int | None = None) -> str:
    """The string form of the target device; ``ordinal`` keeps an index the original named ("cuda:0")."""
    text = DEVICE_STRING_EXPRESSIONS[mode]
    if ordinal is None:
        return text
    if mode == "tpx":
        return f'"tpx:{ordinal}"'
    return f'({text}) + ":{ordinal}"'
