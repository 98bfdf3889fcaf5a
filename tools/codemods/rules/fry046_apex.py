"""FRY046 (kernels.apex): apex FusedAdam -> torch.optim.AdamW, FusedLayerNorm -> torch.nn.LayerNorm;
apex.amp -> review (torch.amp)."""

from __future__ import annotations

from tools.codemods.generic import CallMapRule
from tools.codemods.tables import APEX_CALLS


class Apex(CallMapRule):
    ID = "FRY046"
    NAME = "kernels.apex"
    DESCRIPTION = ("apex FusedAdam -> torch.optim.AdamW, FusedLayerNorm -> torch.nn.LayerNorm; apex.amp -> review "
                   "(torch.amp).")
    CATEGORY = "auto"
    ENTRIES = (46,)
    CALLS = APEX_CALLS


RULE = Apex
