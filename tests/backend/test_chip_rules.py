"""The chip's rules: no float64, finite memory, data-dependent ops, bf16 matmuls, statistics."""

from __future__ import annotations

import pytest
import torch

import backend
from backend import kernels


def test_float64_refused_with_op_and_advice():
    with pytest.raises(TypeError, match=r"float64.*_to_copy.*Use torch.float32"):
        torch.ones(2, device="tpx").double()
    with pytest.raises(TypeError, match=r"float64|Double"):
        torch.zeros(2, device="tpx", dtype=torch.float64)
    with pytest.raises(TypeError, match="float64"):
        torch.ones(2, dtype=torch.float64).to("tpx")
    # float64 on the CPU side of a transfer is fine, and printing works
    assert torch.ones(2, device="tpx").to("cpu", torch.float64).dtype == torch.float64
    assert "tpx" in repr(torch.ones(2, device="tpx") / 3)


def test_float64_can_be_allowed_by_config(tpx_config):
    tpx_config(allow_float64=True)
    assert torch.ones(2, device="tpx").double().dtype == torch.float64


def test_out_of_memory_reports_figures_and_accounting_frees(tpx_config):
    tpx_config(memory_capacity="64MiB")
    base = torch.tpx.memory_allocated()
    keep = torch.empty(8 << 20, dtype=torch.uint8, device="tpx")
    assert torch.tpx.memory_allocated() - base == 8 << 20
    with pytest.raises(torch.OutOfMemoryError) as err:
        torch.empty(100 << 20, dtype=torch.uint8, device="tpx")
    msg = str(err.value)
    assert "104857600 bytes" in msg and "67108864 bytes" in msg and "already allocated" in msg
    del keep
    assert torch.tpx.memory_allocated() == base
    free, total = torch.tpx.mem_get_info()
    assert total == 64 << 20 and free == total - base


def test_peak_memory_and_accelerator_memory_api():
    torch.tpx.reset_peak_memory_stats()
    base = torch.tpx.memory_allocated()
    x = torch.empty(1 << 20, dtype=torch.uint8, device="tpx")
    del x
    assert torch.tpx.max_memory_allocated() >= base + (1 << 20)
    assert torch.accelerator.memory_allocated() == torch.tpx.memory_allocated()


def test_data_dependent_ops_fall_back_with_warning_and_count(fresh_stats):
    kernels.S.warned.discard("nonzero")
    x = torch.tensor([0.0, 1.0, 0.0, 2.0], device="tpx")
    with pytest.warns(kernels.TpxFallbackWarning, match="nonzero"):
        idx = torch.nonzero(x)
    assert idx.device.type == "tpx" and idx.view(-1).tolist() == [1, 3]
    assert torch.masked_select(x, x > 0).tolist() == [1.0, 2.0]
    snap = torch.tpx.op_stats()
    assert snap["cpu_fallback_ops"]["aten::nonzero"] == 1
    assert snap["ops"]["aten::nonzero"]["where"] == "cpu-fallback"
    assert snap["syncs"]["nonzero"] == 1


def test_strict_mode_raises_naming_the_op(tpx_config):
    tpx_config(strict=True)
    with pytest.raises(NotImplementedError, match=r"aten::_?unique"):
        torch.unique(torch.tensor([1, 1, 2], device="tpx"))
    tpx_config(strict=True, fallback_ops="-_unique2")  # configurable set
    assert torch.unique(torch.tensor([1, 1, 2], device="tpx")).tolist() == [1, 2]


def test_matmul_uses_bf16_inputs_unless_highest(tpx_config):
    torch.manual_seed(0)
    a, b = torch.randn(64, 64), torch.randn(64, 64)
    bf16_ref = a.bfloat16().float() @ b.bfloat16().float()
    tpx_config(matmul_precision="bf16")
    got = (a.to("tpx") @ b.to("tpx")).cpu()
    torch.testing.assert_close(got, bf16_ref)
    assert not torch.allclose(got, a @ b, rtol=1e-5, atol=1e-5)
    lin = torch.nn.functional.linear(a.to("tpx"), b.to("tpx")).cpu()
    torch.testing.assert_close(lin, a.bfloat16().float() @ b.bfloat16().float().t())
    tpx_config(matmul_precision="highest")
    torch.testing.assert_close((a.to("tpx") @ b.to("tpx")).cpu(), a @ b)


def test_torch_highest_precision_means_full_fp32(tpx_config, highest_precision):
    tpx_config(matmul_precision="auto")
    a, b = torch.randn(32, 32), torch.randn(32, 32)
    torch.testing.assert_close((a.to("tpx") @ b.to("tpx")).cpu(), a @ b)
    torch.set_float32_matmul_precision("high")
    got = (a.to("tpx") @ b.to("tpx")).cpu()
    torch.testing.assert_close(got, a.bfloat16().float() @ b.bfloat16().float())


def test_stats_count_ops_syncs_and_bytes(fresh_stats):
    x = torch.ones(256, device="tpx")  # fill on device
    y = torch.arange(256.0).to("tpx")  # 1 KiB host -> device
    z = (x + y).sum()
    z.item()
    (x * 2).cpu()
    snap = torch.tpx.op_stats()
    assert snap["ops"]["aten::add"]["calls"] == 1
    assert snap["ops"]["aten::add"]["where"] == "tpx"
    assert snap["ops"]["aten::add"]["time_us"] > 0
    assert snap["bytes_host_to_device"] >= 1024
    assert snap["bytes_device_to_host"] >= 1024
    assert snap["syncs"]["item"] == 1 and snap["syncs"]["cpu"] == 1
    torch.tpx.reset_op_stats()
    assert torch.tpx.op_stats()["ops"] == {}


def test_ops_visible_to_torch_profiler():
    from torch.profiler import ProfilerActivity, profile

    x = torch.randn(16, 16, device="tpx")
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        (x @ x).relu().sum()
    names = {e.key for e in prof.key_averages()}
    assert {"aten::mm", "aten::relu", "tpx::mm"} <= names


def test_configure_rejects_unknown_and_bad_values():
    with pytest.raises(TypeError, match="unknown tpx setting"):
        backend.configure(capacity=1)
    with pytest.raises(ValueError, match="matmul_precision"):
        backend.configure(matmul_precision="fast")
    with pytest.raises(ValueError, match="memory size"):
        backend.configure(memory_capacity="lots")


def test_env_vars_configure_a_fresh_process(tmp_path):
    import subprocess
    import sys

    code = (
        "import torch, backend; c = backend.get_config();"
        "print(c.memory_capacity, c.strict, c.matmul_precision, 'nonzero' in c.fallback_ops, 'foo' in c.fallback_ops)"
    )
    env = {"TPX_MEMORY_CAPACITY": "2GiB", "TPX_STRICT": "1", "TPX_MATMUL_PRECISION": "highest",
           "TPX_FALLBACK_OPS": "-nonzero,+foo", "PATH": "/usr/bin:/bin"}
    import os

    env = {**os.environ, **env}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    assert out.stdout.split() == [str(2 << 30), "True", "highest", "False", "True"]
