"""Tensor basics on tpx, each checked against the same code on CPU."""

from __future__ import annotations

import pytest
import torch

from backend import bridge


def test_factories_and_printing_match_cpu():
    for dev in ("cpu", "tpx"):
        t = torch.arange(6, dtype=torch.float32, device=dev).reshape(2, 3)
        assert t.device.type == dev
    a = torch.arange(6, dtype=torch.float32).reshape(2, 3)
    b = torch.arange(6, dtype=torch.float32, device="tpx").reshape(2, 3)
    assert torch.equal(b.cpu(), a)
    assert repr(b) == repr(a)[:-1] + ", device='tpx:0')"
    assert torch.zeros(3, device="tpx").tolist() == [0.0, 0.0, 0.0]
    assert torch.full((2,), 7, device="tpx").sum().item() == 14
    assert torch.eye(3, device="tpx").trace().item() == 3.0


def test_seeded_random_streams_match_cpu():
    torch.manual_seed(123)
    cpu = (torch.randn(5), torch.rand(3), torch.randint(0, 10, (4,)))
    torch.manual_seed(123)
    dev = (torch.randn(5, device="tpx"), torch.rand(3, device="tpx"), torch.randint(0, 10, (4,), device="tpx"))
    for c, d in zip(cpu, dev, strict=True):
        assert torch.equal(c, d.cpu())


def test_views_and_inplace_reach_the_base():
    for dev in ("cpu", "tpx"):
        base = torch.zeros(4, 4, device=dev)
        base.view(16)[3] = 1.0
        base.t()[0, 2] = 2.0  # transpose view
        base[1:3, 1:3].add_(5.0)  # slice view
        base.as_strided((2,), (5,), 1).fill_(9.0)
        base.diagonal().mul_(2)
        if dev == "cpu":
            expected = base.clone()
        else:
            assert torch.equal(base.cpu(), expected)


def test_out_with_resize():
    a = torch.arange(4.0)
    for dev in ("cpu", "tpx"):
        out = torch.empty(0, device=dev)
        res = torch.add(a.to(dev), 1, out=out)
        assert res is out
        assert out.shape == (4,)
        assert torch.equal(out.cpu(), a + 1)
    out = torch.empty(10, device="tpx")
    torch.mul(a.to("tpx"), 2, out=out[:4])
    assert torch.equal(out[:4].cpu(), a * 2)


def test_mixed_device_error_worded_like_pytorch():
    with pytest.raises(RuntimeError, match="Expected all tensors to be on the same device"):
        torch.ones(2, device="tpx") + torch.ones(2)
    # a 0-dim CPU tensor is allowed, as on CUDA
    assert (torch.ones(2, device="tpx") * torch.tensor(3.0)).tolist() == [3.0, 3.0]


def test_to_cpu_tpx_and_is_tpx():
    x = torch.randn(3)
    y = x.tpx()
    assert y.is_tpx and not x.is_tpx
    assert y.to("cpu").device.type == "cpu"
    assert torch.equal(y.cpu(), x)
    assert torch.nn.Linear(2, 2).tpx().weight.device.type == "tpx"
    assert y.to(torch.int32).dtype == torch.int32


def test_default_device_and_device_context():
    with torch.device("tpx"):
        assert torch.zeros(2).device.type == "tpx"
    torch.set_default_device("tpx")
    try:
        assert torch.ones(1).device.type == "tpx"
    finally:
        torch.set_default_device("cpu")
    assert torch.ones(1).device.type == "cpu"


def test_bridge_is_zero_copy_both_ways():
    t = torch.arange(12, dtype=torch.float32, device="tpx").reshape(3, 4)[:, 1:]
    c = bridge.to_cpu(t)
    assert c.device.type == "cpu"
    assert (c.shape, c.stride(), c.storage_offset()) == (t.shape, t.stride(), t.storage_offset())
    assert c.data_ptr() == t.data_ptr()
    c[0, 0] = 100.0
    assert t[0, 0].item() == 100.0
    back = bridge.from_cpu(c)
    assert back.untyped_storage().data_ptr() == t.untyped_storage().data_ptr()
    cpu = torch.ones(5)
    dev = bridge.from_cpu(cpu)
    assert dev.device.type == "tpx" and dev.data_ptr() == cpu.data_ptr()
    dev.mul_(3)
    assert cpu.tolist() == [3.0] * 5
    plain = torch.ones(2)
    assert bridge.to_cpu(plain) is plain and bridge.from_cpu(dev) is dev


def test_item_tolist_and_comparisons():
    a = torch.tensor([1.5, 2.5], device="tpx")
    assert a.tolist() == [1.5, 2.5]
    assert a[1].item() == 2.5
    assert bool((a > 1).all())
    assert torch.allclose(a, a.clone())


def test_untyped_storage_on_device():
    s = torch.UntypedStorage(16, device="tpx")
    assert s.device.type == "tpx" and s.nbytes() == 16
    s.resize_(64)
    assert s.nbytes() == 64


def test_inplace_view_ops_update_the_tensor_metadata():
    shapes = []
    for dev in ("cpu", "tpx"):
        y = torch.zeros(1, 3, device=dev)
        y.squeeze_(0)
        y.unsqueeze_(1)
        z = torch.arange(6.0, device=dev).view(2, 3)
        z.t_()
        w = torch.arange(3.0, device=dev) @ torch.ones(3, 4, device=dev)  # 1-D @ 2-D squeezes in place
        shapes.append((y.shape, z.shape, z.stride(), z.cpu().tolist(), w.shape))
    assert shapes[0] == shapes[1]
