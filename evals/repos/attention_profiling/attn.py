"""A one-block attention model, using flash-attn when it is installed."""

import torch
import torch.nn.functional as F
from torch import nn

try:
    from flash_attn import flash_attn_func

    HAVE_FLASH = True
except ImportError:
    HAVE_FLASH = False


class AttentionBlock(nn.Module):
    def __init__(self, dim: int = 32, heads: int = 4):
        super().__init__()
        self.heads = heads
        self.qkv = nn.Linear(dim, 3 * dim)
        self.proj = nn.Linear(dim, dim)
        self.norm = nn.LayerNorm(dim)

    def forward(self, x):
        b, t, d = x.shape
        q, k, v = self.qkv(self.norm(x)).chunk(3, dim=-1)
        q, k, v = (z.view(b, t, self.heads, d // self.heads) for z in (q, k, v))
        if HAVE_FLASH and x.dtype in (torch.float16, torch.bfloat16):
            y = flash_attn_func(q, k, v, causal=True)
        else:
            y = F.scaled_dot_product_attention(
                q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), is_causal=True
            ).transpose(1, 2)
        return x + self.proj(y.reshape(b, t, d))


class TinyLM(nn.Module):
    def __init__(self, vocab: int = 64, dim: int = 32):
        super().__init__()
        self.emb = nn.Embedding(vocab, dim)
        self.block = AttentionBlock(dim)
        self.out = nn.Linear(dim, vocab)

    def forward(self, tokens):
        return self.out(self.block(self.emb(tokens)))
