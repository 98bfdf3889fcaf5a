"""Losses for the token tagger.

Tagging data is sparse and unbalanced: padded positions carry IGNORE_INDEX, most tokens are
the background tag, and a batch holds only some of the tags. The loss therefore works on the
labelled positions only, averages the cross-entropy per tag present in the batch (so a rare
tag weighs as much as the background), and adds an online hard-example term.
"""

import torch
import torch.nn as nn
import torch.nn.functional as F

IGNORE_INDEX = -100


class BalancedTaggingLoss(nn.Module):
    def __init__(self, num_tags: int, hard_weight: float = 0.5, tag_weights=None):
        super().__init__()
        self.num_tags = num_tags
        self.hard_weight = hard_weight
        weights = torch.ones(num_tags) if tag_weights is None else torch.as_tensor(tag_weights, dtype=torch.float32)
        self.tag_weights = weights.cuda()

    def forward(self, logits: torch.Tensor, tags: torch.Tensor) -> torch.Tensor:
        """logits: (B, T, num_tags); tags: (B, T) with IGNORE_INDEX where unlabelled."""
        logits = logits.reshape(-1, self.num_tags)
        tags = tags.reshape(-1)
        labelled = tags != IGNORE_INDEX
        if not labelled.any():
            return torch.zeros((), device="cuda", requires_grad=True)
        logits, tags = logits[labelled], tags[labelled]

        per_token = F.cross_entropy(logits, tags, reduction="none")
        per_tag = []
        for tag in torch.unique(tags):
            rows = torch.nonzero(tags == tag, as_tuple=True)[0]
            per_tag.append(per_token[rows].mean() * self.tag_weights[tag])
        balanced = torch.stack(per_tag).sum() / self.tag_weights[torch.unique(tags)].sum()

        # online hard example mining: the tokens whose loss is above the batch mean
        hard = torch.masked_select(per_token, per_token > per_token.mean())
        hard_term = hard.mean() if hard.numel() > 0 else per_token.new_zeros(())
        return balanced + self.hard_weight * hard_term


def tag_accuracy(logits: torch.Tensor, tags: torch.Tensor) -> float:
    labelled = tags != IGNORE_INDEX
    pred = logits.argmax(-1)
    return (pred[labelled] == tags[labelled]).float().mean().item()
