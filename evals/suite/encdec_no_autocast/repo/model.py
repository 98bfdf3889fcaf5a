"""An encoder-decoder transformer that learns to reverse a sequence of tokens (teacher forcing)."""

import math

import torch
from torch import nn

BOS = 1  # token 0 is padding (unused), 1 starts the decoder's input; data tokens are 2..vocab-1


class PositionalEncoding(nn.Module):
    def __init__(self, d_model: int, max_len: int = 64):
        super().__init__()
        pos = torch.arange(max_len).unsqueeze(1)
        div = torch.exp(torch.arange(0, d_model, 2) * (-math.log(10000.0) / d_model))
        pe = torch.zeros(max_len, d_model)
        pe[:, 0::2] = torch.sin(pos * div)
        pe[:, 1::2] = torch.cos(pos * div)
        self.register_buffer("pe", pe)

    def forward(self, x):
        return x + self.pe[: x.size(1)]


class Seq2SeqTransformer(nn.Module):
    def __init__(self, vocab: int = 16, d_model: int = 32, nhead: int = 4, layers: int = 2, ff: int = 64):
        super().__init__()
        self.d_model = d_model
        self.src_emb = nn.Embedding(vocab, d_model)
        self.tgt_emb = nn.Embedding(vocab, d_model)
        self.pos = PositionalEncoding(d_model)
        self.transformer = nn.Transformer(
            d_model=d_model, nhead=nhead, num_encoder_layers=layers, num_decoder_layers=layers,
            dim_feedforward=ff, dropout=0.0, batch_first=True,
        )
        self.out = nn.Linear(d_model, vocab)

    def forward(self, src, tgt_in):
        scale = math.sqrt(self.d_model)
        causal = nn.Transformer.generate_square_subsequent_mask(tgt_in.size(1), device=tgt_in.device)
        h = self.transformer(
            self.pos(self.src_emb(src) * scale), self.pos(self.tgt_emb(tgt_in) * scale), tgt_mask=causal,
        )
        return self.out(h)


def make_batch(batch: int = 32, length: int = 10, vocab: int = 16, generator=None):
    """Random token sequences and their reversal; the decoder input is the target shifted right."""
    src = torch.randint(2, vocab, (batch, length), generator=generator)
    tgt = src.flip(1)
    tgt_in = torch.cat([torch.full((batch, 1), BOS), tgt[:, :-1]], dim=1)
    return src, tgt_in, tgt


@torch.no_grad()
def greedy_reverse(model, src):
    """Decode token by token; returns the predicted reversal of ``src``."""
    model.eval()
    ys = torch.full((src.size(0), 1), BOS, dtype=torch.long, device=src.device)
    for _ in range(src.size(1)):
        logits = model(src, ys)
        ys = torch.cat([ys, logits[:, -1].argmax(-1, keepdim=True)], dim=1)
    return ys[:, 1:]
