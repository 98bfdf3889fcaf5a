"""The C++ compute kernels (backend/csrc/tpx_dispatch.cpp) keep the Python kernels' behaviour."""

from __future__ import annotations

from typing import Any

import pytest
import torch

from backend import kernels

DEV = "tpx"


@pytest.fixture(autouse=True)
def _cpp_loaded() -> None:
    torch.ones(1, device=DEV)  # loads (or builds) the extension, which installs the C++ kernels
    assert kernels._cpp_kernels


def test_out_arg_is_the_callers_tensor_and_is_resized(fresh_stats: Any) -> None:
    a = torch.arange(6.0).reshape(2, 3)
    out = torch.empty(0, device=DEV)
    res = torch.mul(a.to(DEV), 2.0, out=out)
    assert res is out and out.shape == (2, 3) and out.device.type == DEV
    assert torch.equal(out.cpu(), a * 2)
    assert fresh_stats.snapshot()["ops"]["aten::mul"]["calls"] == 1


def test_in_place_ops_return_the_callers_tensor() -> None:
    x = torch.ones(2, 3, device=DEV)
    assert x.add_(1) is x and torch.equal(x.cpu(), torch.full((2, 3), 2.0))
    assert x.t_() is x and x.shape == (3, 2) and x.stride() == (1, 3)


def test_ops_are_counted_and_results_match_cpu(fresh_stats: Any) -> None:
    a, b = torch.randn(4, 5), torch.randn(4, 5)
    out = torch.atan2(a.to(DEV), b.to(DEV))
    assert out.device.type == DEV and torch.equal(out.cpu(), torch.atan2(a, b))
    assert fresh_stats.snapshot()["ops"]["aten::atan2"]["calls"] == 1


def test_mixed_devices_and_float64_are_refused() -> None:
    x = torch.ones(3, device=DEV)
    with pytest.raises(RuntimeError, match="same device"):
        torch.atan2(x, torch.ones(3))
    with pytest.raises(TypeError, match="float64"):
        torch.sum(x, dim=0, dtype=torch.float64)  # a float64 result of a C++-run op


def test_profiler_sees_tpx_op_labels() -> None:
    x = torch.ones(3, device=DEV)
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
        torch.atan2(x, x)
    assert any(e.name == "tpx::atan2" for e in prof.events())
