"""FRY047 (kernels.flash-attn): flash_attn kernels -> review with a scaled_dot_product_attention
rewrite (layout differs: (B,S,H,D) vs (B,H,S,D))."""

from __future__ import annotations

from tools.codemods.generic import NameReportRule
from tools.codemods.tables import FLASH_MODULES, FLASH_NAMES


class FlashAttn(NameReportRule):
    ID = "FRY047"
    NAME = "kernels.flash-attn"
    DESCRIPTION = ("flash_attn kernels -> review with a scaled_dot_product_attention rewrite (layout differs: "
                   "(B,S,H,D) vs (B,H,S,D)).")
    CATEGORY = "review"
    ENTRIES = (47,)
    NAMES = FLASH_NAMES
    MODULES = FLASH_MODULES


RULE = FlashAttn
