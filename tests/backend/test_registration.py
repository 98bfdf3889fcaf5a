"""Registration: torch.tpx shaped like torch.cuda, torch.accelerator, generators, streams, events."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
import torch

import backend


def test_device_module_like_cuda():
    t = torch.tpx
    assert t.is_available() and t.device_count() == 2 and t.current_device() == 0
    t.set_device(0)
    t.synchronize()
    assert isinstance(t.get_device_name(), str) and "tpx" in t.get_device_name()
    assert t.get_device_properties().total_memory == backend.get_config().memory_capacity
    with t.device(0):
        assert torch.ones(1, device="tpx").device == torch.device("tpx", 0)
    with pytest.raises(RuntimeError, match="invalid device ordinal"):
        t.set_device(3)
    t.empty_cache()
    assert torch.bfloat16 in t.get_amp_supported_dtype()


def test_bf16_supported_and_computed():
    """tpx computes bfloat16: code choosing its dtype with ``is_bf16_supported()`` picks bf16 (issue 18)."""
    assert torch.tpx.is_bf16_supported() is True
    assert torch.tpx.is_bf16_supported(including_emulation=False) is True
    assert torch.get_device_module("tpx").is_bf16_supported() is True
    # the device-generic query the codemods map torch.cuda.is_bf16_supported() to
    assert torch.accelerator.is_available() is True
    a, b = torch.randn(8, 16, dtype=torch.bfloat16), torch.randn(16, 4, dtype=torch.bfloat16)
    out = a.to("tpx") @ b.to("tpx")
    assert out.dtype == torch.bfloat16 and torch.equal(out.cpu(), a @ b)


def test_rng_state_roundtrip_matches_cpu_semantics():
    torch.tpx.manual_seed(7)
    state = torch.tpx.get_rng_state()
    a = torch.randn(4, device="tpx")
    torch.tpx.set_rng_state(state)
    b = torch.randn(4, device="tpx")
    assert torch.equal(a.cpu(), b.cpu())
    torch.manual_seed(7)
    assert torch.equal(torch.randn(4), a.cpu())


def test_accelerator_api_reports_tpx():
    assert torch.accelerator.current_accelerator().type == "tpx"
    assert torch.accelerator.is_available() and torch.accelerator.device_count() == 2
    torch.accelerator.synchronize()
    before = torch.accelerator.memory_allocated()
    x = torch.empty(4096, dtype=torch.uint8, device="tpx")
    assert torch.accelerator.memory_allocated() == before + 4096
    del x


def test_generator_on_device_is_reproducible():
    g1 = torch.Generator(device="tpx").manual_seed(3)
    g2 = torch.Generator(device="tpx").manual_seed(3)
    assert g1.device.type == "tpx"
    a = torch.randn(5, device="tpx", generator=g1)
    b = torch.randn(5, device="tpx", generator=g2)
    assert torch.equal(a.cpu(), b.cpu())
    c = torch.randn(5, device="tpx", generator=g1)  # the generator advanced
    assert not torch.equal(a.cpu(), c.cpu())
    assert torch.equal(a.cpu(), torch.randn(5, generator=torch.Generator().manual_seed(3)))


def test_streams_and_timed_events():
    s = torch.Stream("tpx")
    assert s.device.type == "tpx"
    assert torch.tpx.current_stream().device.type == "tpx"
    with torch.tpx.stream(s):
        assert torch.tpx.current_stream() == s
    start, end = torch.Event(enable_timing=True), torch.Event(enable_timing=True)
    start.record()
    x = torch.randn(200, 200, device="tpx")
    (x @ x).sum()
    end.record()
    end.synchronize()
    assert start.query() and end.elapsed_time(start) <= 0 <= start.elapsed_time(end)


def test_record_stream_on_tpx_tensors_as_on_cuda():
    """A prefetcher's pattern: a batch copied on a side stream, then recorded on the compute stream."""
    side = torch.Stream("tpx")
    with torch.tpx.stream(side):
        x = torch.arange(6.0).to("tpx", non_blocking=True) * 2
    torch.tpx.current_stream().wait_stream(side)
    x.record_stream(torch.tpx.current_stream())
    x.record_stream(side)
    assert x.device.type == "tpx" and torch.equal(x.cpu(), torch.arange(6.0) * 2)
    with pytest.raises(RuntimeError, match="expected a tpx stream"):  # CUDA refuses another device's stream too
        x.record_stream(torch.Stream("cpu"))
    with pytest.raises(NotImplementedError):  # a host tensor has no stream to record, as with CUDA
        torch.ones(2).record_stream(torch.tpx.current_stream())


def test_import_is_quick_and_version_is_checked():
    code = "import backend, sys; backend._check_torch_version(); print('ok')"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "ok"
    bad = (
        "import torch; torch.__version__ = '2.12.0'; import backend"
    )
    env = {**os.environ, "TORCH_DEVICE_BACKEND_AUTOLOAD": "0"}
    res = subprocess.run([sys.executable, "-c", bad], capture_output=True, text=True, env=env)
    assert res.returncode != 0 and "torch==2.13.0" in res.stderr


def test_autoload_can_be_disabled():
    env = {**os.environ, "TORCH_DEVICE_BACKEND_AUTOLOAD": "0"}
    code = "import torch; print(hasattr(torch, 'tpx'))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True)
    assert out.stdout.strip() == "False"
    out = subprocess.run([sys.executable, "-c", "import torch; print(torch.tpx.is_available())"],
                         capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "True"


def test_second_device_keeps_results_on_it(tpx_config):
    tpx_config(device_count=2)
    assert torch.tpx.device_count() == 2 and torch.accelerator.device_count() == 2
    x = torch.ones(2, device="tpx:1")
    assert {(x + 1).device, x.sum().device, torch.arange(3, device="tpx:1").device} == {torch.device("tpx", 1)}
    assert torch.ones(2).to("tpx:1").device == torch.device("tpx", 1)
    assert x.to("tpx:0").device == torch.device("tpx", 0)
    with torch.tpx.device(1):
        assert torch.zeros(1, device="tpx").device == torch.device("tpx", 1)
    assert torch.tpx.current_device() == 0
