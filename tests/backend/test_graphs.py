"""Graph capture on tpx (torch.tpx.CUDAGraph / torch.tpx.graph): a capture computes nothing the program
sees, replay() runs the captured step again on the captured tensors, as a CUDA graph does."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

pytestmark = pytest.mark.usefixtures("highest_precision")


def _setup(device: str):
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(5, 8), torch.nn.ReLU(), torch.nn.Linear(8, 1)).to(device)
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    g = torch.Generator().manual_seed(1)
    batches = [(torch.randn(16, 5, generator=g), torch.randn(16, 1, generator=g)) for _ in range(6)]
    return model, opt, batches


def _warm_up(model, opt, x, y) -> None:
    """Eager steps before the capture, as the PyTorch docs ask (the optimizer's state exists then)."""
    for _ in range(2):
        opt.zero_grad(set_to_none=True)
        F.mse_loss(model(x), y).backward()
        opt.step()


def test_replayed_training_step_matches_the_eager_loop():
    model, opt, batches = _setup("tpx")
    static_x, static_y = torch.zeros(16, 5, device="tpx"), torch.zeros(16, 1, device="tpx")
    static_x.copy_(batches[0][0])
    static_y.copy_(batches[0][1])
    _warm_up(model, opt, static_x, static_y)
    graph = torch.tpx.CUDAGraph()
    opt.zero_grad(set_to_none=True)
    with torch.tpx.graph(graph):
        static_loss = F.mse_loss(model(static_x), static_y)
        static_loss.backward()
        opt.step()
    replayed = []
    for x, y in batches:
        static_x.copy_(x)  # the replay reads the static inputs as they are now
        static_y.copy_(y)
        graph.replay()
        replayed.append(static_loss.item())
    params = [p.detach().cpu() for p in model.parameters()]

    # the same steps eagerly on the CPU; the capture itself trained nothing
    model, opt, batches = _setup("cpu")
    _warm_up(model, opt, *batches[0])
    eager = []
    for x, y in batches:
        opt.zero_grad(set_to_none=True)
        loss = F.mse_loss(model(x), y)
        loss.backward()
        opt.step()
        eager.append(loss.item())
    assert replayed == pytest.approx(eager, rel=1e-5, abs=1e-7)
    for got, want in zip(params, model.parameters(), strict=True):
        torch.testing.assert_close(got, want.detach(), rtol=1e-5, atol=1e-6)


def test_capture_leaves_what_existed_as_it_was_and_replay_writes_it():
    acc = torch.ones(3, device="tpx")
    x = torch.full((3,), 2.0, device="tpx")
    graph = torch.tpx.Graph()
    assert not torch.tpx.is_current_stream_capturing()
    with torch.tpx.graph(graph, pool=torch.tpx.graph_pool_handle()):
        assert torch.tpx.is_current_stream_capturing()
        acc.add_(x)
        out = acc * 10
    assert not torch.tpx.is_current_stream_capturing()
    assert acc.cpu().tolist() == [1.0, 1.0, 1.0]  # capturing computed nothing the program sees
    graph.replay()
    assert acc.cpu().tolist() == [3.0, 3.0, 3.0] and out.cpu().tolist() == [30.0, 30.0, 30.0]
    x.fill_(1.0)
    graph.replay()
    assert acc.cpu().tolist() == [4.0, 4.0, 4.0] and out.cpu().tolist() == [40.0, 40.0, 40.0]


def test_a_nested_capture_is_refused_and_graphed_callables_run_eagerly():
    outer, inner = torch.tpx.Graph(), torch.tpx.Graph()
    outer.capture_begin()
    try:
        with pytest.raises(RuntimeError, match="already under way"):
            inner.capture_begin()
    finally:
        outer.capture_end()
    model = torch.nn.Linear(2, 2).to("tpx")
    assert torch.tpx.make_graphed_callables(model, (torch.zeros(1, 2, device="tpx"),)) is model
