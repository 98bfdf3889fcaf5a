"""A small convolutional token tagger and its synthetic data."""

import torch
import torch.nn as nn

from losses import IGNORE_INDEX

VOCAB = 64
NUM_TAGS = 5


class ConvTagger(nn.Module):
    def __init__(self, vocab: int = VOCAB, num_tags: int = NUM_TAGS, dim: int = 32):
        super().__init__()
        self.embed = nn.Embedding(vocab, dim)
        self.conv = nn.Conv1d(dim, dim, kernel_size=3, padding=1)
        self.head = nn.Sequential(nn.GELU(), nn.Linear(dim, num_tags))

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        x = self.embed(tokens)                             # (B, T, D)
        x = x + self.conv(x.transpose(1, 2)).transpose(1, 2)
        return self.head(x)                                # (B, T, num_tags)


def tag_of(tokens: torch.Tensor) -> torch.Tensor:
    """The rule the tagger must learn: a token's tag depends on it and on its left neighbour.
    Tag 0 (background) is the most frequent."""
    left = torch.roll(tokens, 1, dims=1)
    left[:, 0] = 0
    tags = (tokens % 8 + left % 3) - 4
    return tags.clamp(min=0, max=NUM_TAGS - 1)


def make_batch(batch: int, length: int, generator: torch.Generator):
    """Token batches with random lengths: the padding is labelled IGNORE_INDEX."""
    tokens = torch.randint(1, VOCAB, (batch, length), generator=generator)
    tags = tag_of(tokens)
    lengths = torch.randint(length // 2, length + 1, (batch,), generator=generator)
    pad = torch.arange(length)[None, :] >= lengths[:, None]
    tokens[pad] = 0
    tags[pad] = IGNORE_INDEX
    return tokens, tags
