"""Several tpx devices in one process: indices, guards, per-device memory, cross-device copies,
the mixed-device error, and TPX_DEVICE_COUNT / TPX_VISIBLE_DEVICES (issue 13)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading

import pytest
import torch

import backend
from backend import config

T0, T1 = torch.device("tpx", 0), torch.device("tpx", 1)


def test_two_devices_by_default():
    assert config.TpxConfig().device_count == 2
    assert torch.tpx.device_count() == 2 and torch.accelerator.device_count() == 2
    assert torch.tpx.is_available() and torch.accelerator.is_available()
    x, y = torch.ones(2, device="tpx:0"), torch.ones(2, device=torch.device("tpx", 1))
    assert (x.device, y.device) == (T0, T1) and (x.get_device(), y.get_device()) == (0, 1)
    assert (y * 2).device == T1 and y.sum().device == T1 and y[0].device == T1 and y.view(2, 1).device == T1
    assert torch.empty_like(y).device == T1 and torch.zeros_like(x, device="tpx:1").device == T1


def test_current_device_guards():
    t = torch.tpx
    assert t.current_device() == 0 and torch.ones(1, device="tpx").device == T0
    with t.device(1):
        assert t.current_device() == 1 and torch.accelerator.current_device_index() == 1
        # factories with device="tpx" land on the current device, as with CUDA
        assert {torch.ones(1, device="tpx").device, torch.randn(2, device="tpx").device,
                torch.arange(3, device="tpx").device, torch.ones(2).to("tpx").device} == {T1}
        with t.device("tpx:0"):
            assert t.current_device() == 0
        assert t.current_device() == 1
        with t.device_of(torch.ones(1, device="tpx:0")):
            assert t.current_device() == 0
    assert t.current_device() == 0
    t.set_device(1)
    try:
        assert torch.empty(1, device="tpx").device == T1
        torch.accelerator.set_device_index(0)  # through the C++ device guard
        assert t.current_device() == 0
    finally:
        t.set_device(0)
    with torch.accelerator.device_index(1):
        assert torch.zeros(1, device="tpx").device == T1
    assert t.current_device() == 0


def test_current_device_is_per_thread():
    seen = []
    torch.tpx.set_device(1)
    try:
        th = threading.Thread(target=lambda: seen.append(torch.tpx.current_device()))
        th.start()
        th.join()
        assert seen == [0] and torch.tpx.current_device() == 1
    finally:
        torch.tpx.set_device(0)


def test_invalid_ordinal_names_the_settings():
    for call in (lambda: torch.tpx.set_device(2), lambda: torch.empty(1, device="tpx:2"),
                 lambda: torch.ones(1).to("tpx:5"), lambda: torch.accelerator.set_device_index(2),
                 lambda: torch.tpx.memory_allocated(3), lambda: torch.tpx.device(7).__enter__()):
        with pytest.raises(RuntimeError, match=r"invalid device ordinal.*TPX_DEVICE_COUNT=2.*TPX_VISIBLE_DEVICES"):
            call()
    assert torch.tpx.current_device() == 0
    torch.tpx.set_device(-1)  # a negative index is a no-op, as in torch.cuda
    assert torch.tpx.current_device() == 0


def test_int_device_means_the_accelerator():
    x = torch.ones(3)
    assert x.to(1).device == T1 and x.to(0).device == T0 and torch.zeros(1, device=1).device == T1
    model = torch.nn.Linear(3, 2)
    w = model.weight
    model.to(1)
    assert model.weight is w and w.device == T1 and model(x.to(1)).device == T1


def test_cross_device_copies_keep_values():
    a = torch.randn(4, 5)
    x = a.to("tpx:0")
    y = x.to("tpx:1")
    assert y.device == T1 and torch.equal(y.cpu(), a)
    assert y.untyped_storage().data_ptr() != x.untyped_storage().data_ptr()  # a copy, not an alias
    y.add_(1)
    assert torch.equal(x.cpu(), a)
    z = torch.empty(4, 5, device="tpx:0")
    z.copy_(y)
    assert z.device == T0 and torch.equal(z.cpu(), a + 1)
    assert torch.equal(y.to(0).cpu(), a + 1)


def test_mixed_devices_raise_like_cuda():
    x, y = torch.ones(3, device="tpx:0"), torch.ones(3, device="tpx:1")
    msg = r"Expected all tensors to be on the same device, but found at least two devices, tpx:0 and tpx:1!"
    for call in (lambda: x + y, lambda: y + x, lambda: torch.cat([x, y]), lambda: torch.where(x > 0, x, y),
                 lambda: x.add_(y), lambda: torch.nn.functional.linear(torch.ones(2, 3, device="tpx:1"),
                                                                       torch.ones(4, 3, device="tpx:0"))):
        with pytest.raises(RuntimeError, match=msg):
            call()
    assert torch.equal(x.cpu(), torch.ones(3))
    assert torch.equal((x + y.to(0)).cpu(), torch.full((3,), 2.0))


def test_training_on_the_second_device_matches_cpu(highest_precision):
    torch.manual_seed(0)
    ref = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU(), torch.nn.Linear(8, 1))
    dev = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU(), torch.nn.Linear(8, 1))
    dev.load_state_dict(ref.state_dict())
    dev.to("tpx:1")
    xb, yb = torch.randn(16, 4), torch.randn(16, 1)
    for model, x, y in ((ref, xb, yb), (dev, xb.to("tpx:1"), yb.to("tpx:1"))):
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        for _ in range(3):
            opt.zero_grad()
            torch.nn.functional.mse_loss(model(x), y).backward()
            opt.step()
    assert all(p.device == T1 and p.grad.device == T1 for p in dev.parameters())
    for p, q in zip(ref.parameters(), dev.parameters(), strict=True):
        torch.testing.assert_close(q.detach().cpu(), p.detach(), rtol=1e-5, atol=1e-6)
    assert torch.tpx.current_device() == 0


def test_memory_is_accounted_per_device():
    t = torch.tpx
    base0, base1 = t.memory_allocated(0), t.memory_allocated(1)
    allocs1 = t.memory_stats(1)["allocation.all.allocated"]
    t.reset_peak_memory_stats(1)
    x = torch.empty(1 << 20, dtype=torch.uint8, device="tpx:1")
    assert t.memory_allocated(1) == base1 + (1 << 20) and t.memory_allocated(0) == base0
    assert t.memory_allocated("tpx:1") == t.memory_allocated(torch.device("tpx", 1)) == base1 + (1 << 20)
    assert torch.accelerator.memory_allocated(1) == base1 + (1 << 20)
    st = t.memory_stats(1)
    assert st["allocation.all.allocated"] == allocs1 + 1 and st["allocated_bytes.all.current"] == base1 + (1 << 20)
    free1, total1 = t.mem_get_info(1)
    assert total1 == backend.get_config().memory_capacity and free1 == total1 - t.memory_allocated(1)
    assert t.mem_get_info(0)[0] == total1 - t.memory_allocated(0)
    with t.device(1):
        assert t.memory_allocated() == base1 + (1 << 20)
    del x
    assert t.memory_allocated(1) == base1 and t.max_memory_allocated(1) >= base1 + (1 << 20)
    t.reset_peak_memory_stats(1)
    assert t.max_memory_allocated(1) == base1
    y = torch.ones(1024, device="tpx:0").to("tpx:1")  # a copy is counted on its own device
    assert t.memory_allocated(1) == base1 + 4096 and t.memory_allocated(0) == base0
    del y


def test_each_device_has_its_own_capacity(tpx_config):
    t = torch.tpx
    tpx_config(memory_capacity=t.memory_allocated(0) + t.memory_allocated(1) + (1 << 20))
    cap = backend.get_config().memory_capacity
    keep = torch.empty(cap - t.memory_allocated(0) - 4096, dtype=torch.uint8, device="tpx:0")
    # device 0 is nearly full; device 1 still has its whole capacity
    other = torch.empty(cap - t.memory_allocated(1) - 4096, dtype=torch.uint8, device="tpx:1")
    ooms = t.memory_stats(1)["num_ooms"]
    with pytest.raises(torch.OutOfMemoryError, match=r"out of memory on device tpx:1.*capacity of tpx:1"):
        torch.empty(8192, dtype=torch.uint8, device="tpx:1")
    with pytest.raises(torch.OutOfMemoryError, match="on device tpx:0"):
        torch.ones(8192, dtype=torch.uint8).to("tpx:0")
    assert t.memory_stats(1)["num_ooms"] == ooms + 1
    del keep, other


def test_config_validates_visible_devices(tpx_config):
    assert config.parse_visible("1, 0") == (1, 0) and config.parse_visible("") == ()
    assert config.parse_visible(None) is None
    for bad in ("0,a", "0,,1", "-1", "1.5"):
        with pytest.raises(ValueError, match="TPX_VISIBLE_DEVICES"):
            config.parse_visible(bad)
    with pytest.raises(ValueError, match="TPX_VISIBLE_DEVICES: device 2 does not exist"):
        tpx_config(visible_devices="2")
    with pytest.raises(ValueError, match="listed twice"):
        tpx_config(visible_devices=[1, 1])
    with pytest.raises(ValueError, match="TPX_DEVICE_COUNT"):
        tpx_config(device_count=0)
    tpx_config(device_count=4, visible_devices="3,1,2")
    assert torch.tpx.device_count() == torch.accelerator.device_count() == 3
    assert torch.ones(1, device="tpx:2").device == torch.device("tpx", 2)
    with pytest.raises(RuntimeError, match=r"tpx:3 requested but only 3.*TPX_VISIBLE_DEVICES='3,1,2'"):
        torch.ones(1, device="tpx:3")


_PROBE = """
import json, torch
out = {"count": torch.tpx.device_count(), "acc": torch.accelerator.device_count(),
       "available": torch.tpx.is_available()}
try:
    out["device"] = str(torch.ones(1, device="tpx:" + str(max(out["count"] - 1, 0))).device)
except Exception as exc:
    out["error"] = f"{type(exc).__name__}: {exc}"
print(json.dumps(out))
"""


def _probe(**env_vars: str) -> dict:
    env = {k: v for k, v in os.environ.items() if k not in ("TPX_DEVICE_COUNT", "TPX_VISIBLE_DEVICES")}
    env.update(env_vars)
    proc = subprocess.run([sys.executable, "-c", _PROBE], capture_output=True, text=True, env=env, timeout=120)
    if proc.returncode != 0:
        return {"returncode": proc.returncode, "stderr": proc.stderr}
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_visible_devices_env_in_a_subprocess():
    # (the defaults, 2 devices, are checked in this process by test_two_devices_by_default)
    assert _probe(TPX_DEVICE_COUNT="4", TPX_VISIBLE_DEVICES="2,0,3") == {
        "count": 3, "acc": 3, "available": True, "device": "tpx:2"}
    none = _probe(TPX_VISIBLE_DEVICES="")
    assert (none["count"], none["acc"], none["available"]) == (0, 0, False)
    assert "no tpx device is visible" in none["error"] and "TPX_VISIBLE_DEVICES=''" in none["error"]
    bad = _probe(TPX_VISIBLE_DEVICES="0,2")
    assert bad.get("returncode") and "TPX_VISIBLE_DEVICES: device 2 does not exist" in bad["stderr"]


def test_kernels_outside_the_generic_path_keep_the_device():
    """The fused RNN cells and compiled graphs put their results on their inputs' device."""
    torch.manual_seed(0)
    for rnn in (torch.nn.LSTM(3, 4), torch.nn.GRU(3, 4)):
        rnn.to(1)
        x = torch.randn(5, 2, 3, device="tpx:1", requires_grad=True)
        out, _ = rnn(x)
        out.sum().backward()
        assert out.device == T1 and x.grad.device == T1
        assert all(p.grad.device == T1 for p in rnn.parameters())
    f = torch.compile(lambda a: (a * 2 + 1).relu(), backend="tpx")
    a = torch.randn(6)
    y = f(a.to("tpx:1"))
    assert y.device == T1 and torch.equal(y.cpu(), (a * 2 + 1).relu())


def test_save_and_load_keep_the_index(tmp_path):
    x = torch.arange(4.0, device="tpx:1")
    torch.save(x, tmp_path / "x.pt")
    y = torch.load(tmp_path / "x.pt")
    assert y.device == T1 and torch.equal(y.cpu(), x.cpu())
    assert torch.load(tmp_path / "x.pt", map_location="tpx:0").device == T0


def test_data_parallel_over_two_devices_matches_cpu(highest_precision):
    """Code that wraps its model in DataParallel when device_count() > 1 takes that path on tpx."""
    torch.manual_seed(0)
    ref = torch.nn.Sequential(torch.nn.Linear(3, 5), torch.nn.ReLU(), torch.nn.Linear(5, 2))
    model = torch.nn.Sequential(torch.nn.Linear(3, 5), torch.nn.ReLU(), torch.nn.Linear(5, 2))
    model.load_state_dict(ref.state_dict())
    dp = torch.nn.DataParallel(model.to("tpx"), list(range(torch.accelerator.device_count())))
    assert dp.device_ids == [0, 1]
    x = torch.randn(6, 3)
    for net, inp in ((ref, x), (dp, x.to("tpx"))):
        opt = torch.optim.SGD(net.parameters(), lr=0.1)
        for _ in range(2):
            opt.zero_grad()
            net(inp).pow(2).sum().backward()
            opt.step()
    out = dp(x)  # a CPU batch is scattered too; the output is gathered on tpx:0
    assert out.device == T0 and all(p.device == T0 for p in model.parameters())
    torch.testing.assert_close(out.detach().cpu(), ref(x).detach(), rtol=1e-5, atol=1e-6)
    for p, q in zip(ref.parameters(), model.parameters(), strict=True):
        torch.testing.assert_close(q.detach().cpu(), p.detach(), rtol=1e-5, atol=1e-6)
    rows = torch.nn.parallel.comm.scatter(torch.arange(6.0), [0, 1])
    assert [r.device for r in rows] == [T0, T1]
    assert torch.equal(torch.nn.parallel.comm.gather(rows, destination=-1), torch.arange(6.0))
