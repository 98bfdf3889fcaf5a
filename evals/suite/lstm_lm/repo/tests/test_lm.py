import torch

from corpus import Dictionary, markov_text
from main import batchify, evaluate, run
from model import RNNModel, repackage_hidden


def test_forward_shapes_on_gpu():
    ntoken = len(Dictionary())
    model = RNNModel(ntoken).cuda()
    hidden = model.init_hidden(4)
    out, (h, c) = model(torch.randint(0, ntoken, (7, 4)).cuda(), hidden)
    assert out.shape == (7, 4, ntoken)
    assert h.shape == c.shape == (2, 4, 64)


def test_repackage_cuts_the_graph():
    model = RNNModel(len(Dictionary())).cuda()
    _, hidden = model(torch.zeros(3, 2, dtype=torch.long).cuda(), model.init_hidden(2))
    assert hidden[0].grad_fn is not None
    assert all(h.grad_fn is None for h in repackage_hidden(hidden))


def test_training_beats_uniform_perplexity():
    model, history, val_loss = run(epochs=1, max_batches=12)
    assert history[-1] < history[0]
    assert val_loss < torch.log(torch.tensor(float(len(Dictionary())))).item()


def test_batchify_columns():
    data = Dictionary().tokenize(markov_text(100))
    cols = batchify(data, 4)
    assert cols.shape == (25, 4)
    assert torch.equal(cols[:, 1].cpu(), data[25:50])
