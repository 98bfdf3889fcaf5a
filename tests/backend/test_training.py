"""Training on tpx matches training on CPU step for step (highest matmul precision)."""

from __future__ import annotations

import copy
import io
import pickle

import pytest
import torch
from torch import nn


class _SDPA(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.qkv = nn.Linear(8, 24)

    def forward(self, x):
        q, k, v = self.qkv(x).view(2, 5, 3, 2, 4).unbind(2)
        return nn.functional.scaled_dot_product_attention(
            q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), is_causal=True
        )


MODELS = {
    "linear": (lambda: nn.Linear(8, 4), lambda: torch.randn(5, 8)),
    "conv1d": (lambda: nn.Conv1d(3, 4, 3), lambda: torch.randn(2, 3, 10)),
    "conv2d_bn": (lambda: nn.Sequential(nn.Conv2d(3, 4, 3), nn.BatchNorm2d(4), nn.ReLU()),
                  lambda: torch.randn(2, 3, 8, 8)),
    "layernorm": (lambda: nn.Sequential(nn.Linear(8, 8), nn.LayerNorm(8)), lambda: torch.randn(5, 8)),
    "embedding": (lambda: nn.Embedding(10, 4), lambda: torch.randint(0, 10, (3, 5))),
    "lstm": (lambda: nn.LSTM(4, 6, batch_first=True), lambda: torch.randn(2, 5, 4)),
    "gru": (lambda: nn.GRU(4, 6, num_layers=2), lambda: torch.randn(5, 2, 4)),
    "sdpa": (_SDPA, lambda: torch.randn(2, 5, 8)),
    "transformer": (
        lambda: nn.TransformerEncoder(nn.TransformerEncoderLayer(16, 2, 32, dropout=0.1, batch_first=True), 2),
        lambda: torch.randn(2, 6, 16),
    ),
}

OPTIMIZERS = {
    "sgd": lambda p: torch.optim.SGD(p, lr=0.1),
    "sgd_momentum_foreach": lambda p: torch.optim.SGD(p, lr=0.05, momentum=0.9, foreach=True),
    "sgd_fused": lambda p: torch.optim.SGD(p, lr=0.05, momentum=0.9, fused=True),
    "adam_foreach": lambda p: torch.optim.Adam(p, lr=1e-2, foreach=True),
    "adam_fused": lambda p: torch.optim.Adam(p, lr=1e-2, fused=True),
    "adamw": lambda p: torch.optim.AdamW(p, lr=1e-2, foreach=False),
    "adamw_fused": lambda p: torch.optim.AdamW(p, lr=1e-2, fused=True),
}


def _train(device, make_model, make_input, make_opt, steps=3, clip=None):
    torch.manual_seed(0)
    model = make_model().to(device)
    opt = make_opt(model.parameters())
    torch.manual_seed(1)
    losses = []
    for _ in range(steps):
        x = make_input().to(device)
        out = model(x)
        if isinstance(out, tuple):
            out = out[0]
        loss = out.float().pow(2).mean()
        opt.zero_grad()
        loss.backward()
        if clip is not None:
            torch.nn.utils.clip_grad_norm_(model.parameters(), clip)
        opt.step()
        losses.append(loss.item())
    return losses, {k: v.detach().cpu() for k, v in model.state_dict().items()}


@pytest.mark.parametrize("name", sorted(MODELS))
def test_model_trains_like_cpu(name, highest_precision):
    make_model, make_input = MODELS[name]
    cpu_losses, cpu_state = _train("cpu", make_model, make_input, OPTIMIZERS["sgd"])
    tpx_losses, tpx_state = _train("tpx", make_model, make_input, OPTIMIZERS["sgd"])
    torch.testing.assert_close(tpx_losses, cpu_losses, rtol=1e-5, atol=1e-6)
    for key in cpu_state:
        torch.testing.assert_close(tpx_state[key], cpu_state[key], rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("opt", sorted(OPTIMIZERS))
def test_optimizers_match_cpu(opt, highest_precision):
    make_model, make_input = MODELS["layernorm"]
    cpu = _train("cpu", make_model, make_input, OPTIMIZERS[opt])
    dev = _train("tpx", make_model, make_input, OPTIMIZERS[opt])
    torch.testing.assert_close(dev[0], cpu[0], rtol=1e-5, atol=1e-6)
    for key in cpu[1]:
        torch.testing.assert_close(dev[1][key], cpu[1][key], rtol=1e-5, atol=1e-6)


def test_clip_grad_norm_matches_cpu():
    norms = []
    for dev in ("cpu", "tpx"):
        torch.manual_seed(0)
        m = nn.Linear(8, 4).to(dev)
        m(torch.ones(3, 8, device=dev)).sum().backward()
        norms.append(torch.nn.utils.clip_grad_norm_(m.parameters(), 0.1))
        assert norms[-1].device.type == dev
    torch.testing.assert_close(norms[1].cpu(), norms[0])


def test_autocast_cast_policy():
    m = nn.Linear(8, 4).to("tpx")
    x = torch.randn(3, 8, device="tpx")
    with torch.autocast("tpx", dtype=torch.bfloat16):
        y = m(x)  # lower precision
        s = torch.softmax(y, -1)  # float32
        e = y.exp()  # float32
        c = torch.cat([y, x[:, :4]], 0)  # promote to the widest
        r = y.relu()  # unlisted: runs in its input's dtype
    assert (y.dtype, s.dtype, e.dtype, c.dtype, r.dtype) == (
        torch.bfloat16, torch.float32, torch.float32, torch.float32, torch.bfloat16
    )
    # same policy as CPU autocast for the lower-precision op
    with torch.autocast("cpu", dtype=torch.bfloat16):
        y_cpu = m.cpu()(x.cpu())
    assert y_cpu.dtype == y.dtype
    torch.testing.assert_close(y.cpu().float(), y_cpu.float())


def test_autocast_off_setting_casts_nothing_and_says_what_it_takes():
    import backend

    m = nn.Linear(8, 4).to("tpx")
    x = torch.randn(3, 8, device="tpx")
    backend.configure(autocast="off")
    try:
        with torch.autocast("tpx", dtype=torch.float16):
            y = m(x)
            s = torch.softmax(y.half(), -1)  # a float32 op of the policy: not cast up either
        assert (y.dtype, s.dtype) == (torch.float32, torch.float16)
        assert torch.equal(y, m(x))  # what the region computes without autocast
    finally:
        backend.configure(autocast="on")
    with torch.autocast("tpx", dtype=torch.float16):
        assert m(x).dtype == torch.float16
    with pytest.raises(ValueError, match="TPX_AUTOCAST"):
        backend.configure(autocast="maybe")
    with pytest.raises(ValueError, match="TPX_RNG"):
        backend.configure(rng="cpu")


def test_grad_scaler_runs_and_float64_rule_still_holds():
    m = nn.Linear(8, 4).to("tpx")
    opt = torch.optim.SGD(m.parameters(), lr=0.1)
    scaler = torch.amp.GradScaler("tpx", init_scale=1024.0)
    before = m.weight.detach().cpu().clone()
    with torch.autocast("tpx", dtype=torch.bfloat16):
        loss = m(torch.randn(3, 8, device="tpx")).float().sum()
    scaler.scale(loss).backward()
    scaler.step(opt)
    scaler.update()
    assert scaler.get_scale() == 1024.0
    assert not torch.equal(before, m.weight.detach().cpu())
    with pytest.raises(TypeError, match="float64"):
        torch.ones(2, device="tpx").double()


def test_save_load_both_ways(tmp_path):
    torch.manual_seed(0)
    m = nn.Linear(3, 2).to("tpx")
    path = tmp_path / "m.pt"
    torch.save(m.state_dict(), path)
    on_cpu = torch.load(path, map_location="cpu")
    assert on_cpu["weight"].device.type == "cpu"
    assert torch.equal(on_cpu["weight"], m.weight.detach().cpu())
    assert torch.load(path)["weight"].device.type == "tpx"
    torch.save(nn.Linear(3, 2).state_dict(), path)
    assert torch.load(path, map_location="tpx")["bias"].device.type == "tpx"


def test_deepcopy_and_pickle():
    m = nn.Linear(3, 2).to("tpx")
    m2 = copy.deepcopy(m)
    assert m2.weight.device.type == "tpx"
    assert torch.equal(m2.weight.detach().cpu(), m.weight.detach().cpu())
    t = torch.arange(4.0, device="tpx")
    buf = io.BytesIO()
    pickle.dump(t, buf)
    t2 = pickle.loads(buf.getvalue())
    assert t2.device.type == "tpx" and t2.tolist() == [0.0, 1.0, 2.0, 3.0]


def test_dataloader_pin_memory():
    ds = torch.utils.data.TensorDataset(torch.arange(8.0).view(8, 1))
    batches = list(torch.utils.data.DataLoader(ds, batch_size=4, pin_memory=True))
    assert [b[0].is_pinned() for b in batches] == [True, True]
    assert torch.cat([b[0] for b in batches]).view(-1).tolist() == list(map(float, range(8)))
