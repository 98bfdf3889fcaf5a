import math

import torch
import torch.nn.functional as F

from losses import IGNORE_INDEX, BalancedTaggingLoss
from tagger import make_batch
from train import train


def test_single_tag_batch_is_plain_cross_entropy_plus_hard_term():
    criterion = BalancedTaggingLoss(3, hard_weight=0.0)
    logits = torch.tensor([[[2.0, 0.0, 0.0], [0.0, 1.0, 0.0], [0.5, 0.5, 0.5]]]).cuda()
    tags = torch.tensor([[0, 0, IGNORE_INDEX]]).cuda()
    expected = F.cross_entropy(logits[0, :2].cpu(), tags[0, :2].cpu())
    assert math.isclose(criterion(logits, tags).item(), expected.item(), rel_tol=1e-6)


def test_ignored_positions_do_not_change_the_loss():
    gen = torch.Generator().manual_seed(5)
    _, tags = make_batch(4, 12, gen)
    logits = torch.randn(4, 12, 5, generator=gen)
    criterion = BalancedTaggingLoss(5)
    base = criterion(logits.cuda(), tags.cuda()).item()
    noisy = logits.clone()
    noisy[tags == IGNORE_INDEX] = 100.0
    assert math.isclose(criterion(noisy.cuda(), tags.cuda()).item(), base, rel_tol=1e-6)


def test_training_lowers_the_loss():
    _, losses = train(steps=30)
    assert sum(losses[-5:]) / 5 < sum(losses[:5]) / 5
