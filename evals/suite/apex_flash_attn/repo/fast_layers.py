"""Fast kernels when they are installed (apex, flash-attn), PyTorch fallbacks when they are not.

pip install flash-attn --no-build-isolation    # needs nvcc and an sm_80+ GPU
pip install -v --no-build-isolation --config-settings "--build-option=--cuda_ext" apex
"""

import math

import torch
import torch.nn.functional as F

try:
    from apex.normalization import FusedLayerNorm as LayerNorm
    from apex.optimizers import FusedAdam

    HAS_APEX = True
except ImportError:
    from torch.nn import LayerNorm

    FusedAdam = None
    HAS_APEX = False

try:
    from flash_attn import flash_attn_func

    HAS_FLASH_ATTN = True
except ImportError:
    flash_attn_func = None
    HAS_FLASH_ATTN = False

__all__ = ["LayerNorm", "attention", "make_optimizer", "HAS_APEX", "HAS_FLASH_ATTN"]


def attention(q, k, v, causal: bool = True):
    """q, k, v: (batch, seq, heads, head_dim), flash-attn's layout. Returns the same layout."""
    if HAS_FLASH_ATTN and q.is_cuda and q.dtype in (torch.float16, torch.bfloat16):
        return flash_attn_func(q, k, v, causal=causal)
    q, k, v = (t.transpose(1, 2) for t in (q, k, v))
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))
    if causal:
        t = q.size(-2)
        mask = torch.ones(t, t, dtype=torch.bool, device="cuda").triu(1)
        scores = scores.masked_fill(mask, float("-inf"))
    return (F.softmax(scores, dim=-1) @ v).transpose(1, 2)


def make_optimizer(params, lr: float, weight_decay: float = 0.01):
    if HAS_APEX:
        return FusedAdam(params, lr=lr, weight_decay=weight_decay, adam_w_mode=True)
    return torch.optim.AdamW(params, lr=lr, weight_decay=weight_decay, fused=torch.cuda.is_available())
