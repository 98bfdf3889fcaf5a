import torch

from model import BOS, Seq2SeqTransformer, greedy_reverse, make_batch
from train import train


def test_batches_reverse_the_source():
    src, tgt_in, tgt = make_batch(4, generator=torch.Generator().manual_seed(0))
    assert torch.equal(tgt, src.flip(1))
    assert (tgt_in[:, 0] == BOS).all() and torch.equal(tgt_in[:, 1:], tgt[:, :-1])


def test_forward_shape_on_gpu():
    model = Seq2SeqTransformer().cuda()
    src, tgt_in, _ = (t.cuda() for t in make_batch(3))
    assert model(src, tgt_in).shape == (3, 10, 16)


def test_greedy_decoding_returns_one_token_per_position():
    model = Seq2SeqTransformer().cuda()
    src, _, _ = make_batch(2)
    out = greedy_reverse(model, src.cuda())
    assert out.shape == src.shape and out.is_cuda


def test_training_lowers_the_loss():
    _, losses = train(steps=8)
    assert losses[-1] < losses[0]
