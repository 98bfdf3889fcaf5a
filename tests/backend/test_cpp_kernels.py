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


def _rnn_pair(cls: type, **kw: Any) -> tuple[torch.nn.Module, torch.nn.Module]:
    torch.manual_seed(0)
    cpu = cls(4, 6, num_layers=2, **kw)
    dev = cls(4, 6, num_layers=2, **kw)
    dev.load_state_dict(cpu.state_dict())
    return cpu, dev.to(DEV)


def _run_rnn(m: torch.nn.Module, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, list[torch.Tensor]]:
    x = x.detach().clone().requires_grad_()
    y, _ = m(x)
    y.square().sum().backward()
    assert x.grad is not None
    return y.detach().cpu(), x.grad.cpu(), [p.grad.cpu() for p in m.parameters() if p.grad is not None]


def test_rnn_cells_run_in_cpp_and_match_the_cpu(fresh_stats: Any, tpx_config: Any) -> None:
    tpx_config(matmul_precision="highest")
    cpu, dev = _rnn_pair(torch.nn.GRU)
    x = torch.randn(5, 3, 4)
    y, gx, gp = _run_rnn(cpu, x)
    ty, tgx, tgp = _run_rnn(dev, x.to(DEV))
    torch.testing.assert_close(ty, y)
    torch.testing.assert_close(tgx, gx)
    for a, b in zip(tgp, gp, strict=True):
        torch.testing.assert_close(a, b)
    ops = fresh_stats.snapshot()["ops"]
    assert ops["aten::_thnn_fused_gru_cell"]["calls"] == 10 and ops["aten::_thnn_fused_gru_cell"]["where"] == "tpx"
    assert ops["aten::_thnn_fused_gru_cell_backward"]["calls"] == 10
    # counted by the C++ kernels, not by the Python ones
    assert not any("thnn" in name for name in fresh_stats.ops)


def test_lstm_cells_run_in_cpp_when_matmuls_round_to_bf16(fresh_stats: Any, tpx_config: Any) -> None:
    tpx_config(matmul_precision="bf16")
    _, dev = _rnn_pair(torch.nn.LSTM)
    y, gx, _ = _run_rnn(dev, torch.randn(5, 3, 4, device=DEV))
    ops = fresh_stats.snapshot()["ops"]
    assert ops["aten::_thnn_fused_lstm_cell"]["calls"] == 10
    assert ops["aten::_thnn_fused_lstm_cell_backward_impl"]["calls"] == 10
    assert "aten::lstm" not in ops and not any("thnn" in name for name in fresh_stats.ops)
    assert torch.isfinite(y).all() and torch.isfinite(gx).all()


def test_lstm_is_the_cpus_lstm_with_fp32_matmuls(fresh_stats: Any, tpx_config: Any) -> None:
    tpx_config(matmul_precision="highest")
    cpu, dev = _rnn_pair(torch.nn.LSTM, batch_first=True)
    x = torch.randn(3, 5, 4)
    y, gx, gp = _run_rnn(cpu, x)
    xt = x.to(DEV)
    fresh_stats.reset()
    ty, tgx, tgp = _run_rnn(dev, xt)
    # the same kernel on the same memory: the same numbers, gradients on tpx
    assert torch.equal(ty, y) and torch.equal(tgx, gx)
    assert all(torch.equal(a, b) for a, b in zip(tgp, gp, strict=True)) and len(tgp) == len(gp) == 8
    assert all(p.grad is not None and p.grad.device.type == DEV for p in dev.parameters())
    ops = fresh_stats.snapshot()["ops"]
    assert ops["aten::lstm"]["calls"] == 1 and ops["aten::lstm"]["where"] == "tpx"
    assert not any("thnn" in name for name in ops)
    assert fresh_stats.snapshot()["bytes_host_to_device"] == 0  # zero-copy: nothing moved


def test_fallback_ops_run_in_cpp_once_warned_and_stay_zero_copy(fresh_stats: Any, tpx_config: Any) -> None:
    kernels.S.warned.discard("nonzero")
    cx = torch.tensor([0.0, 3.0, 0.0, 5.0, 1.0])
    x = cx.to(DEV)
    fresh_stats.reset()
    with pytest.warns(kernels.TpxFallbackWarning, match="nonzero"):  # the first call: Python warns
        first = torch.nonzero(x)
    second = torch.nonzero(x)
    third = torch.nonzero(x)
    for got in (first, second, third):
        assert got.device.type == DEV and torch.equal(got.cpu(), torch.nonzero(cx))
    assert fresh_stats.ops["aten::nonzero"][0] == 1  # only the warned call went through Python
    fresh_stats.reset()
    torch.nonzero(x)
    torch.nonzero(x)
    snap = fresh_stats.snapshot()
    row = snap["ops"]["aten::nonzero"]
    assert row["calls"] == 2 and row["cpu_fallback_calls"] == 2 and row["where"] == "cpu-fallback"
    assert snap["syncs"] == {"nonzero": 2} and snap["cpu_fallback_ops"] == {"aten::nonzero": 2}
    # zero-copy: the input is read in place and the result wrapped, nothing crosses to the host
    assert snap["bytes_device_to_host"] == snap["bytes_host_to_device"] == 0
    assert "aten::nonzero" not in fresh_stats.ops
    tpx_config(strict=True)  # strict mode still refuses it (Python's decision)
    with pytest.raises(NotImplementedError, match="nonzero"):
        torch.nonzero(x)


def test_copies_run_in_cpp_with_the_same_rules_and_counts(fresh_stats: Any) -> None:
    c = torch.arange(6.0).reshape(2, 3)
    t = c.to(DEV)  # host -> device (a CPU tensor's _to_copy, then tpx's copy_)
    h = t.to(torch.float16)  # on device
    back = h.cpu()  # device -> host: a sync
    assert h.device.type == DEV and h.dtype == torch.float16 and torch.equal(back, c.half())
    dst = torch.empty(2, 3, device=DEV)
    dst.copy_(c.t().contiguous().t())  # a strided host source
    assert torch.equal(dst.cpu(), c)
    snap = fresh_stats.snapshot()
    assert snap["ops"]["aten::_to_copy"]["calls"] == 4 and snap["ops"]["aten::_to_copy"]["where"] == "tpx"
    assert snap["ops"]["aten::copy_"]["calls"] == 1
    assert snap["bytes_host_to_device"] == 2 * 24 and snap["copies_host_to_device"] == 2
    assert snap["bytes_device_to_host"] == 12 + 24 and snap["syncs"] == {"cpu": 2}
    out = torch.empty(2, 3)
    out.copy_(t)  # device -> host through copy_
    assert torch.equal(out, c) and fresh_stats.snapshot()["syncs"] == {"cpu": 2, "copy_to_host": 1}
    assert not any(name in fresh_stats.ops for name in ("aten::_to_copy", "aten::copy_"))  # counted in C++
    with pytest.raises(TypeError, match=r"aten::_to_copy to torch\.float64"):
        t.double()
    dst.copy_(torch.full((2, 3), 0.5, dtype=torch.float64))  # a float64 host source casts into float32
    assert dst.dtype == torch.float32 and torch.equal(dst.cpu(), torch.full((2, 3), 0.5))


def test_fresh_results_are_counted_and_freed_and_shared_cpu_memory_wraps_once() -> None:
    from backend import bridge

    x = torch.ones(1024, device=DEV)
    base = torch.tpx.memory_allocated()
    y = x + 1  # a CPU kernel's fresh result, wrapped without the shared-memory table
    assert torch.tpx.memory_allocated() == base + 4096 and torch.equal(y.cpu(), torch.full((1024,), 2.0))
    del y
    assert torch.tpx.memory_allocated() == base
    cpu = torch.zeros(8)  # CPU memory another tensor still holds: wrapping it twice gives one storage
    a, b = bridge.from_cpu(cpu), bridge.from_cpu(cpu)
    assert a.untyped_storage().data_ptr() == b.untyped_storage().data_ptr() == cpu.data_ptr()
    assert torch.tpx.memory_allocated() == base + 32
    a.add_(1)
    assert b.cpu().tolist() == [1.0] * 8 == cpu.tolist()


def test_lazy_conj_and_neg_inputs_still_resolve(fresh_stats: Any) -> None:
    z = torch.tensor([1 + 2j, 3 - 1j], dtype=torch.complex64)
    w = torch.tensor([2 - 1j, 1 + 1j], dtype=torch.complex64)
    zt, wt = z.to(DEV), w.to(DEV)
    assert zt.conj().is_conj()
    assert torch.equal(torch.mul(zt.conj(), wt).cpu(), torch.mul(z.conj(), w))
    assert torch.equal(torch.exp(zt.conj()).cpu(), torch.exp(z.conj()))
    assert torch.equal(torch.sin(torch._neg_view(zt)).cpu(), torch.sin(-z))
    assert fresh_stats.snapshot()["ops"]["aten::exp"]["where"] == "tpx"


def test_a_cpu_alias_keeps_the_tpx_memory_alive_until_it_goes() -> None:
    from backend import bridge

    base = torch.tpx.memory_allocated()
    t = torch.full((256,), 7.0, device=DEV)
    c = bridge.to_cpu(t)
    del t
    assert torch.tpx.memory_allocated() == base + 1024  # the alias holds the device storage
    assert c.sum().item() == 7.0 * 256
    back = bridge.from_cpu(c[128:])  # back to the same device storage, not a new one
    del c
    assert torch.tpx.memory_allocated() == base + 1024 and back.cpu().tolist() == [7.0] * 128
    del back
    assert torch.tpx.memory_allocated() == base


_RANDOM = {
    "aten::native_dropout": lambda d: torch.nn.functional.dropout(torch.ones(64, device=d), 0.25),
    "aten::normal_": lambda d: torch.empty(9, device=d).normal_(),
    "aten::uniform_": lambda d: torch.empty(2, 5, device=d).uniform_(-1, 1),
    "aten::bernoulli_": lambda d: torch.empty(12, device=d).bernoulli_(0.3),
    "aten::randperm": lambda d: torch.randperm(10, device=d),
    "aten::multinomial": lambda d: torch.multinomial(torch.ones(3, 6, device=d), 2),
}


@pytest.mark.parametrize("name", sorted(_RANDOM))
def test_random_ops_run_in_cpp_with_the_cpus_numbers(name: str, fresh_stats: Any) -> None:
    op = _RANDOM[name]
    torch.manual_seed(5)
    got = op(DEV)
    assert got.device.type == DEV
    torch.manual_seed(5)
    assert torch.equal(got.cpu(), op("cpu"))  # in step with the host stream, draw for draw
    assert name not in fresh_stats.ops  # no Python kernel ran
    assert fresh_stats.snapshot()["ops"][name]["calls"] == 1
    # a generator argument: a tpx one draws its own CPU stream and moves its offset
    if name in ("aten::normal_", "aten::randperm"):
        g = torch.Generator(device=DEV).manual_seed(3)
        out = torch.empty(9, device=DEV).normal_(generator=g) if name == "aten::normal_" else \
            torch.randperm(10, device=DEV, generator=g)
        ref = torch.empty(9).normal_(generator=torch.Generator().manual_seed(3)) if name == "aten::normal_" else \
            torch.randperm(10, generator=torch.Generator().manual_seed(3))
        assert torch.equal(out.cpu(), ref) and g.get_offset() == 12


def test_counter_mode_dropout_in_cpp_leaves_the_cpu_stream_alone(fresh_stats: Any) -> None:
    state = torch.tensor([99, 400], dtype=torch.int64).view(torch.uint8)  # never handed out: counter mode
    torch.tpx.set_rng_state(state)
    host = torch.get_rng_state()
    x = torch.ones(32, 8, device=DEV, requires_grad=True)
    y = torch.nn.functional.dropout(x, 0.5)
    assert torch.equal(torch.get_rng_state(), host)  # it ran another stream, then got its own back
    assert torch.tpx.get_rng_state().view(torch.int64).tolist() == [99, 656]
    torch.tpx.set_rng_state(state)
    again = torch.nn.functional.dropout(x, 0.5)
    assert torch.equal(y.detach().cpu(), again.detach().cpu())
    y.sum().backward()  # the mask's gradient: 2 where kept, 0 where dropped
    assert torch.equal(x.grad.cpu(), (y.detach().cpu() != 0).float() * 2)
    assert "aten::native_dropout" not in fresh_stats.ops


def test_host_rng_mode_keeps_random_ops_in_python(fresh_stats: Any, tpx_config: Any) -> None:
    tpx_config(rng="host")
    torch.empty(4, device=DEV).normal_()
    assert fresh_stats.ops["aten::normal_"][0] == 1  # Python's host_draw bookkeeping


def test_backward_runs_on_the_calling_thread_and_matches_the_cpu(highest_precision: Any) -> None:
    import threading

    seen: list[int] = []
    w_cpu = torch.randn(4, 3, requires_grad=True)
    w = w_cpu.detach().to(DEV).requires_grad_()
    w.register_hook(lambda g: seen.append(threading.get_ident()))
    x = torch.randn(5, 4)
    (x.to(DEV) @ w).tanh().sum().backward()
    (x @ w_cpu).tanh().sum().backward()
    assert seen == [threading.get_ident()]  # no hand-off to an autograd device thread
    assert torch.allclose(w.grad.cpu(), w_cpu.grad, atol=1e-6)
    with torch.autograd.set_multithreading_enabled(True):  # the user's choice still holds
        for _ in range(2):  # (the engine starts its device threads during the first such call)
            (x.to(DEV) @ w).sum().backward()
    assert seen[-1] != threading.get_ident()
    assert not torch._C._is_multithreading_enabled()  # and is undone on the way out


def test_a_thread_that_never_touches_tpx_keeps_autograd_threads() -> None:
    import threading

    flags: list[bool] = []

    def work() -> None:
        flags.append(torch._C._is_multithreading_enabled())
        torch.ones(2, device=DEV).add(1)
        flags.append(torch._C._is_multithreading_enabled())

    t = threading.Thread(target=work)
    t.start()
    t.join()
    assert flags == [True, False]
