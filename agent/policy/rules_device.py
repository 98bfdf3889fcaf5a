"""Mixed-device error -> add the device to the tensor that was created without one.

The edit is :mod:`tools.codemods.fixes` FIX001 (``add_factory_device``): the factory table is the
codemods' (``tools.codemods.tables.DEVICE_FACTORIES``) and the device variable is found as the
codemods find it (``tools.codemods.device``).
"""

from __future__ import annotations

from agent.policy.base import Diagnosis, FixContext, PolicyRule, Proposal, first_site_fix, new_text
from tools.codemods.fixes import add_factory_device

RULE = "add_missing_device"
KINDS = ("mixed_devices",)


def apply(diag: Diagnosis, ctx: FixContext) -> Proposal | None:
    if diag.kind not in KINDS:
        return None
    return first_site_fix(
        ctx, diag, rule=RULE,
        fix=lambda frame, text: new_text(add_factory_device(text, frame.line, mode=ctx.device_mode,
                                                            filename=frame.file)),
        reason=lambda site: f"mixed devices at {site} ({diag.first_line}): "
                            "create the tensor on the device it is used with",
    )


class AddMissingDevice(PolicyRule):
    ID = RULE
    KINDS = KINDS
    ORDER = 60
    DESCRIPTION = ("mixed devices -> device= added to the tensor factory created without one")
    apply = staticmethod(apply)
