"""The unboxed C++ kernels for the hot ops (backend/csrc/tpx_fast.cpp) and the adopted results.

Each op they run must give the CPU's result bit for bit (values, dtype, shape, strides), take
views and non-contiguous inputs, return the caller's tensor from in-place forms, and keep every
rule of the generic kernel (mixed devices, float64, profiler labels, bf16 matmuls, fallback ops),
which they reach by handing the call over.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import torch
import torch.nn.functional as F

from backend import _ext, kernels

DEV = "tpx"


@pytest.fixture(autouse=True)
def _cpp_loaded(highest_precision: Any) -> None:
    torch.ones(1, device=DEV)  # loads (or builds) the extension, which installs the C++ kernels
    assert kernels._cpp_kernels


def _fast_calls() -> dict[str, int]:
    return dict(_ext.get().fast_op_calls())


def _same(a: Any, b: Any) -> None:
    if isinstance(a, (tuple, list)):
        assert len(a) == len(b)
        for x, y in zip(a, b, strict=True):
            _same(x, y)
        return
    assert a.device.type == DEV
    c = a.cpu()
    assert c.dtype == b.dtype and c.shape == b.shape and c.stride() == b.stride()
    assert torch.equal(c, b), (c, b)


def _g(seed: int = 0) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def _r(*shape: int, seed: int = 0) -> torch.Tensor:
    return torch.randn(*shape, generator=_g(seed))


# (op name counted, function of the inputs, inputs made on the CPU); each runs on both devices.
CASES: list[tuple[str, Callable[..., Any], tuple[torch.Tensor, ...]]] = [
    ("aten::addmm", lambda b, x, w: torch.addmm(b, x, w.t()), (_r(8), _r(3, 5), _r(8, 5, seed=1))),
    ("aten::addmm", lambda b, x, w: F.linear(x, w, b), (_r(8), _r(3, 5), _r(8, 5, seed=1))),
    ("aten::mm", lambda a, b: a @ b, (_r(4, 6), _r(6, 3, seed=1))),
    ("aten::bmm", torch.bmm, (_r(2, 3, 4), _r(2, 4, 5, seed=1))),
    ("aten::native_layer_norm", lambda x, w, b: F.layer_norm(x, (6,), w, b), (_r(2, 3, 6), _r(6), _r(6, seed=2))),
    ("aten::native_layer_norm", lambda x, w, b: torch.native_layer_norm(x, (6,), w, b, 1e-5),
     (_r(2, 3, 6), _r(6), _r(6, seed=2))),
    ("aten::_scaled_dot_product_flash_attention_for_cpu",
     lambda q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=True),
     (_r(1, 2, 5, 8), _r(1, 2, 5, 8, seed=1), _r(1, 2, 5, 8, seed=2))),
    ("aten::gelu", F.gelu, (_r(4, 7),)),
    ("aten::gelu", lambda x: F.gelu(x, approximate="tanh"), (_r(4, 7),)),
    ("aten::relu", torch.relu, (_r(4, 7),)),
    ("aten::tanh", torch.tanh, (_r(4, 7),)),
    ("aten::sigmoid", torch.sigmoid, (_r(4, 7),)),
    ("aten::_softmax", lambda x: x.softmax(-1), (_r(4, 7),)),
    ("aten::_log_softmax", lambda x: x.log_softmax(0), (_r(4, 7),)),
    ("aten::nll_loss_forward", lambda x, t: F.nll_loss(x.log_softmax(-1), t),
     (_r(5, 4), torch.tensor([0, 3, 1, 2, 3]))),
    ("aten::add", lambda a, b: a + b * 2, (_r(3, 4), _r(3, 4, seed=1))),
    ("aten::add", lambda a, b: a + b, (_r(3, 4), _r(4, seed=1))),  # broadcast
    ("aten::add", lambda a: a + torch.tensor(2.5), (_r(3, 4),)),  # a CPU scalar tensor
    ("aten::add", lambda a, b: a + b, (torch.arange(6).view(2, 3), torch.arange(3))),  # int64
    ("aten::add", lambda a, b: a + b, (_r(3, 4).bfloat16(), _r(3, 4, seed=1).bfloat16())),
    ("aten::sub", lambda a, b: a - b, (_r(3, 4), _r(3, 4, seed=1))),
    ("aten::mul", lambda a, b: a * b, (_r(3, 4).t(), _r(4, 3, seed=1))),  # a transposed input
    ("aten::div", lambda a, b: a / b, (_r(3, 4), _r(3, 4, seed=1).abs() + 1)),
    ("aten::neg", torch.neg, (_r(3, 4),)),
    ("aten::exp", torch.exp, (_r(3, 4),)),
    ("aten::sqrt", torch.sqrt, (_r(3, 4).abs(),)),
    ("aten::rsqrt", torch.rsqrt, (_r(3, 4).abs() + 0.1,)),
    ("aten::pow", lambda x: x.pow(2), (_r(3, 4),)),
    ("aten::clamp", lambda x: x.clamp(min=-0.5, max=0.5), (_r(3, 4),)),
    ("aten::bitwise_not", torch.bitwise_not, (_r(3, 4) > 0,)),
    ("aten::eq", lambda x: x == 1, (torch.tensor([1, 2, 1, 3]),)),
    ("aten::eq", lambda x, y: x == y, (torch.tensor([1, 2, 1, 3]), torch.tensor([1, 0, 1, 0]))),
    ("aten::where", lambda c, a, b: torch.where(c, a, b), (_r(3, 4) > 0, _r(3, 4), _r(3, 4, seed=1))),
    ("aten::sum", lambda x: x.sum(dim=1), (_r(3, 4),)),
    ("aten::sum", lambda x: x.sum(), (_r(3, 4),)),
    ("aten::mean", lambda x: x.mean(dim=0, keepdim=True), (_r(3, 4),)),
    ("aten::any", lambda x: x.any(dim=-1), (_r(3, 4) > 1,)),
    ("aten::argmax", lambda x: x.argmax(dim=-1, keepdim=True), (_r(3, 4),)),
    ("aten::cat", lambda a, b: torch.cat([a, b], dim=1), (_r(2, 3, 4), _r(2, 1, 4, seed=1))),
    ("aten::cat", lambda a, b: torch.cat([a.transpose(0, 1), b]), (_r(3, 2), _r(1, 3, seed=1))),
    ("aten::cat", lambda a, b: torch.stack([a, b]), (_r(2, 3), _r(2, 3, seed=1))),
    ("aten::index_select", lambda x, i: x.index_select(0, i), (_r(6, 3), torch.tensor([4, 0, 4, 2]))),
    ("aten::gather", lambda x, i: x.gather(1, i), (_r(4, 5), torch.tensor([[0], [4], [2], [2]]))),
    ("aten::topk", lambda x: torch.topk(x, 2, dim=-1), (_r(5, 6),)),
    ("aten::scatter_add", lambda x, i, s: x.scatter_add(0, i, s),
     (torch.zeros(3, 2), torch.tensor([[0, 1], [2, 2], [0, 0]]), _r(3, 2))),
    ("aten::index_add", lambda x, i, s: x.index_add(0, i, s), (torch.zeros(4, 2), torch.tensor([3, 0, 3]), _r(3, 2))),
    # the second round: indexing with tensors and masks, embeddings, scatter, out-of-place masked_fill
    ("aten::index", lambda x, m: x[m], (_r(5, 3), torch.tensor([True, False, True, True, False]))),
    ("aten::index", lambda x, m: x[m], (_r(4, 3), _r(4, 3, seed=1) > 0)),  # a full-shape mask
    ("aten::index", lambda x, i: x[:, i], (_r(4, 5), torch.tensor([4, 0, 4]))),  # a None before the index
    ("aten::index", lambda x, i, j: x[i, j], (_r(4, 5), torch.tensor([0, 3]), torch.tensor([[1], [4]]))),
    ("aten::index", lambda x, i: x.t()[i], (_r(4, 5), torch.tensor([2, 2, 0]))),  # a transposed input
    ("aten::embedding", lambda w, i: F.embedding(i, w), (_r(10, 4), torch.tensor([[1, 9], [9, 0]]))),
    ("aten::_embedding_bag_forward_only", lambda w, i, o: F.embedding_bag(i, w, o, mode="mean"),
     (_r(10, 4), torch.tensor([1, 2, 4, 5, 4, 3, 2, 9]), torch.tensor([0, 4]))),
    ("aten::_embedding_bag_forward_only", lambda w, i, o: F.embedding_bag(i, w, o, mode="max"),
     (_r(10, 4), torch.tensor([1, 2, 4, 5, 4, 3, 2, 9]), torch.tensor([0, 3]))),
    ("aten::_embedding_bag_forward_only", lambda w, i, o, p: F.embedding_bag(i, w, o, mode="sum", per_sample_weights=p),
     (_r(10, 4), torch.tensor([1, 2, 4, 5]), torch.tensor([0, 1]), _r(4, seed=3))),
    ("aten::scatter", lambda x, i, s: x.scatter(1, i, s), (torch.zeros(3, 4), torch.tensor([[0, 3], [1, 1], [2, 0]]),
                                                         _r(3, 2))),
    ("aten::scatter", lambda x, i: x.scatter(1, i, 2.5), (torch.zeros(3, 4), torch.tensor([[0], [3], [1]]))),
    ("aten::masked_fill", lambda x, m: x.masked_fill(m, -1e9), (_r(3, 4), _r(3, 4, seed=1) > 0)),
    ("aten::masked_fill", lambda x, m: x.masked_fill(m, 0.0), (_r(3, 4), torch.tensor([True, False, True, False]))),
    ("aten::masked_fill", lambda x, m, v: x.masked_fill(m, v), (_r(3, 4), _r(3, 4, seed=1) > 0, torch.tensor(7.0))),
]


@pytest.mark.parametrize("name, fn, inputs", CASES, ids=[f"{c[0]}-{i}" for i, c in enumerate(CASES)])
def test_hot_ops_run_unboxed_and_match_the_cpu_bit_for_bit(name: str, fn: Callable[..., Any],
                                                            inputs: tuple[torch.Tensor, ...]) -> None:
    expected = fn(*inputs)
    args = [x.to(DEV) for x in inputs]
    _ext.get().reset_op_counters()
    got = fn(*args)
    _same(got, expected)
    assert _fast_calls().get(name, 0) >= 1, _fast_calls()


@pytest.mark.parametrize("method, args", [
    ("add_", (2.0,)), ("mul_", (3.0,)), ("div_", (4.0,)), ("sub_", (1.0,)), ("zero_", ()), ("fill_", (7.0,)),
    ("lerp_", (0.25,)), ("addcmul_", (0.5,)), ("addcdiv_", (0.5,)),
])
def test_in_place_forms_return_the_callers_tensor_and_match_the_cpu(method: str, args: tuple) -> None:
    a, b = _r(3, 4), _r(3, 4, seed=1).abs() + 1
    extra: tuple = ()
    if method in ("add_", "mul_", "div_", "sub_"):
        extra = (b,)
        args = ()
    elif method == "lerp_":
        extra = (b,)
    elif method in ("addcmul_", "addcdiv_"):
        extra = (b, b * 2)
        args = ()
    cpu = a.clone()
    getattr(cpu, method)(*extra, *args)
    x = a.to(DEV)
    view = x[:, 1:]  # a view of it sees the update
    _ext.get().reset_op_counters()
    res = getattr(x, method)(*(e.to(DEV) for e in extra), *args)
    assert res is x
    _same(x, cpu)
    assert torch.equal(view.cpu(), cpu[:, 1:])
    assert sum(_fast_calls().values()) >= 1


def test_index_add_scatter_add_and_masked_fill_in_place() -> None:
    i, s = torch.tensor([3, 0, 3]), _r(3, 2)
    m = torch.tensor([[True, False], [False, False], [True, True], [False, True]])
    cpu = torch.zeros(4, 2)
    cpu.index_add_(0, i, s).scatter_add_(0, torch.tensor([[1, 1]]), s[:1]).masked_fill_(m, -1.0)
    x = torch.zeros(4, 2, device=DEV)
    _ext.get().reset_op_counters()
    res = x.index_add_(0, i.to(DEV), s.to(DEV)).scatter_add_(0, torch.tensor([[1, 1]], device=DEV), s[:1].to(DEV))
    res = res.masked_fill_(m.to(DEV), -1.0)
    assert res is x
    _same(x, cpu)
    calls = _fast_calls()
    assert calls.get("aten::index_add_") == 1 and calls.get("aten::scatter_add_") == 1
    assert calls.get("aten::masked_fill_") == 1


def test_autograd_through_the_unboxed_kernels_matches_the_cpu() -> None:
    def step(dev: str) -> list[torch.Tensor]:
        torch.manual_seed(0)
        lin = torch.nn.Linear(6, 6).to(dev)
        ln = torch.nn.LayerNorm(6).to(dev)
        x = _r(4, 6).to(dev).requires_grad_()
        h = F.gelu(ln(lin(x)))
        y = torch.cat([h, h.tanh()], dim=1).softmax(-1)
        loss = F.nll_loss(y.log(), torch.tensor([0, 1, 2, 3]).to(dev)) + (y * y).sum()
        loss.backward()
        return [loss.detach(), x.grad, lin.weight.grad, lin.bias.grad, ln.weight.grad, ln.bias.grad]

    for a, b in zip(step(DEV), step("cpu"), strict=True):
        _same(a, b)


def test_the_generic_kernel_keeps_its_rules(tpx_config: Any, fresh_stats: Any) -> None:
    x = torch.ones(3, 4, device=DEV)
    with pytest.raises(RuntimeError, match="same device"):
        x + torch.ones(3, 4)  # a non-scalar CPU tensor
    with pytest.raises(TypeError, match="float64"):
        torch.sum(x, dim=0, dtype=torch.float64)
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
        torch.addmm(torch.ones(4, device=DEV), x, x.t() @ x)
    assert any(e.name == "tpx::addmm" for e in prof.events())
    # a lazily conjugated input is resolved by the whole dispatcher, as before
    z = torch.tensor([1 + 2j, 3 - 1j], device=DEV)
    assert torch.equal((z.conj() * 1).cpu(), torch.tensor([1 - 2j, 3 + 1j]))
    # bf16 matmuls: the generic kernel rounds the operands
    tpx_config(matmul_precision="bf16")
    a, b = _r(4, 8), _r(8, 3, seed=1)
    fresh_stats.reset()
    got = (a.to(DEV) @ b.to(DEV)).cpu()
    assert torch.equal(got, a.bfloat16().float() @ b.bfloat16().float())
    assert _fast_calls().get("aten::mm", 0) == 0
    assert fresh_stats.snapshot()["ops"]["aten::mm"]["calls"] == 1
    # an op configured as a fallback is the generic kernel's (Python's) while strict mode refuses it
    tpx_config(matmul_precision="highest", fallback_ops="+index_select", warn_fallback=False, strict=True)
    fresh_stats.reset()
    with pytest.raises(RuntimeError, match="index_select"):
        x.index_select(0, torch.tensor([2, 0], device=DEV))
    assert _fast_calls().get("aten::index_select", 0) == 0
    # ... and once it may run (not strict, warned or warnings off) the unboxed kernel runs it,
    # counted as the generic kernel counts it: a CPU fallback and a device-to-host sync
    tpx_config(strict=False)
    fresh_stats.reset()
    r = x.index_select(0, torch.tensor([2, 0], device=DEV))
    assert torch.equal(r.cpu(), torch.ones(2, 4))
    assert _fast_calls().get("aten::index_select", 0) == 1
    snap = fresh_stats.snapshot()
    assert snap["cpu_fallback_ops"] == {"aten::index_select": 1}
    assert snap["syncs"].get("index_select") == 1  # (the .cpu() above is one more, "cpu")


def test_tensors_of_two_devices_are_refused() -> None:
    if torch.tpx.device_count() < 2:
        pytest.skip("one tpx device")
    with pytest.raises(RuntimeError, match="tpx:0 and tpx:1"):
        torch.ones(2, device="tpx:0") + torch.ones(2, device="tpx:1")
    y = torch.ones(2, device="tpx:1") * torch.ones(2, device="tpx:1")
    assert y.device == torch.device("tpx", 1)


def test_results_are_adopted_in_place_counted_and_freed() -> None:
    mod = _ext.get()
    x = torch.ones(256, device=DEV)
    base = torch.tpx.memory_allocated()
    before = mod.adopted_results()
    y = x * 2  # the CPU kernel's own result becomes the tpx tensor
    assert mod.adopted_results() == before + 1
    assert y.device.type == DEV and y.untyped_storage().device.type == DEV and not y.is_pinned()
    assert torch._C._dispatch_keys(y) == torch._C._dispatch_keys(x)
    assert torch.tpx.memory_allocated() == base + 256 * 4
    assert torch.equal(y.cpu(), torch.full((256,), 2.0))
    y.add_(1)  # the adopted tensor is an ordinary tpx tensor
    assert torch.equal(y.cpu(), torch.full((256,), 3.0))
    y.resize_(512)  # its storage grows like any tpx storage
    assert torch.tpx.memory_allocated() == base + 512 * 4
    del y
    assert torch.tpx.memory_allocated() == base


@pytest.mark.parametrize("opt_cls", [torch.optim.AdamW, torch.optim.Adam, torch.optim.SGD])
def test_foreach_optimizer_steps_run_as_one_call_each_and_match_the_cpu(opt_cls: type) -> None:
    def train(dev: str) -> list[torch.Tensor]:
        torch.manual_seed(0)
        model = torch.nn.Sequential(torch.nn.Linear(5, 7), torch.nn.Tanh(), torch.nn.Linear(7, 3)).to(dev)
        kw: dict[str, Any] = {"lr": 0.1, "momentum": 0.9} if opt_cls is torch.optim.SGD else {"lr": 0.01}
        opt = opt_cls(model.parameters(), foreach=True, **kw)
        x = _r(4, 5).to(dev)
        for _ in range(3):
            opt.zero_grad()
            model(x).square().mean().backward()
            opt.step()
        return [p.detach() for p in model.parameters()]

    expected = train("cpu")
    _ext.get().reset_op_counters()
    got = train(DEV)
    for a, b in zip(got, expected, strict=True):
        _same(a, b)
    foreach = {k: v for k, v in _fast_calls().items() if k.startswith("aten::_foreach_") and v}
    assert foreach, _fast_calls()


def test_composite_in_place_scalar_forms_run_unboxed() -> None:
    cpu = _r(3, 4)
    x = cpu.to(DEV)
    _ext.get().reset_op_counters()
    assert x.mul_(0.5) is x
    cpu.mul_(0.5)
    _same(x, cpu)
    assert _fast_calls().get("aten::mul_") == 1


@pytest.mark.parametrize("fn", [
    lambda d: torch.arange(7, device=d),
    lambda d: torch.arange(2, 9, device=d),
    lambda d: torch.arange(1, 2, 0.25, device=d),
    lambda d: torch.arange(10, 0, -3, dtype=torch.int32, device=d),
    lambda d: torch.arange(5, dtype=torch.float32, device=d),
], ids=["end", "start-end", "float-step", "int32-descending", "float32"])
def test_arange_with_a_tpx_device_runs_unboxed_and_matches_the_cpu(fn: Callable[[str], torch.Tensor]) -> None:
    _ext.get().reset_op_counters()
    got = fn(DEV)
    _same(got, fn("cpu"))
    assert got.device == torch.device(DEV, torch.tpx.current_device())
    assert _fast_calls().get("aten::arange", 0) == 1


def test_arange_keeps_the_float64_rule(tpx_config: Any) -> None:
    tpx_config(allow_float64=False)
    with pytest.raises(TypeError, match="float64"):
        torch.arange(3, dtype=torch.float64, device=DEV)


def test_data_dependent_ops_run_unboxed_counted_as_fallbacks(tpx_config: Any, fresh_stats: Any) -> None:
    x = _r(6, 3)
    keep = torch.tensor([True, False, True, True, False, True])
    tpx_config(warn_fallback=False)
    fresh_stats.reset()
    rows = keep.to(DEV).nonzero()
    picked = x.to(DEV).masked_select(keep.to(DEV).unsqueeze(1))
    _same(rows, keep.nonzero())
    _same(picked, x.masked_select(keep.unsqueeze(1)))
    calls = _fast_calls()
    assert calls.get("aten::nonzero") == 1 and calls.get("aten::masked_select") == 1
    snap = fresh_stats.snapshot()
    assert snap["cpu_fallback_ops"] == {"aten::nonzero": 1, "aten::masked_select": 1}
    assert snap["syncs"].get("nonzero") == 1 and snap["syncs"].get("masked_select") == 1


def test_index_put_and_in_place_scatter_masked_fill_forms() -> None:
    mask = torch.tensor([[True, False, False], [False, False, True], [True, True, False]])
    i = torch.tensor([0, 2, 0])

    def run(d: str) -> tuple[torch.Tensor, torch.Tensor]:
        a = torch.arange(9.0).view(3, 3).to(d)
        view = a[1:]
        r1 = a.index_put_((i.to(d),), torch.ones(3, device=d), accumulate=True)
        r2 = a.index_put_((mask.to(d),), torch.tensor(-1.0, device=d))
        a[mask.to(d)] = 5.0
        r3 = a.scatter_(1, torch.tensor([[2], [0], [1]], device=d), 0.5)
        r4 = a.scatter_(0, torch.tensor([[1, 1, 1]], device=d), torch.full((1, 3), 3.0, device=d))
        r5 = a.masked_fill_(mask.t().to(d), torch.tensor(8.0, device=d))
        assert all(r is a for r in (r1, r2, r3, r4, r5))
        return a, view

    _ext.get().reset_op_counters()
    (got, got_view), (want, want_view) = run(DEV), run("cpu")
    _same(got, want)
    _same(got_view, want_view)
    calls = _fast_calls()
    for name in ("aten::index_put_", "aten::scatter_", "aten::masked_fill_"):
        assert calls.get(name, 0) + calls.get("aten::_index_put_impl_", 0) >= 1, (name, calls)
    assert calls.get("aten::scatter_") == 2


def test_autograd_through_the_second_rounds_kernels_matches_the_cpu() -> None:
    def step(dev: str) -> list[torch.Tensor]:
        torch.manual_seed(0)
        emb = torch.nn.Embedding(12, 4).to(dev)
        bag = torch.nn.EmbeddingBag(12, 4, mode="mean").to(dev)
        tok = torch.tensor([[1, 5, 7], [7, 2, 11]]).to(dev)
        h = emb(tok) + bag(tok.flatten(), torch.tensor([0, 2]).to(dev)).unsqueeze(1)[:, :1]
        mask = (tok > 4).to(dev)
        picked = h[mask]
        scat = torch.zeros(2, 3, 4, device=dev).scatter(1, tok.remainder(3).unsqueeze(-1).expand(-1, -1, 4), h)
        loss = picked.sum() + h.masked_fill(~mask.unsqueeze(-1), 0.0).pow(2).sum() + scat.tanh().sum()
        loss.backward()
        return [loss.detach(), emb.weight.grad, bag.weight.grad]

    _ext.get().reset_op_counters()
    got = step(DEV)
    calls = _fast_calls()
    for a, b in zip(got, step("cpu"), strict=True):
        _same(a, b)
    assert calls.get("aten::_embedding_bag", 0) == 1 and calls.get("aten::index", 0) >= 1


def test_input_aliases_are_reused_across_dtypes_shapes_and_views_and_hold_no_memory() -> None:
    mod = _ext.get()
    base = torch.tpx.memory_allocated()
    x = torch.arange(60, dtype=torch.float32).reshape(3, 4, 5)
    idx = torch.tensor([2, 0, 2, 1])
    t, ti = x.to(DEV), idx.to(DEV)
    (t + t).sum()  # fills this thread's pool
    before = mod.reused_aliases()
    # each op's aliases come from the pool that the op before gave back: another dtype, another
    # shape, a non-contiguous view with an offset, a zero-dim tensor, an in-place update
    cases: list[tuple[Callable[..., Any], tuple[torch.Tensor, ...]]] = [
        (lambda a, i: a.index_select(1, i), (x, idx)),
        (lambda a: a.permute(2, 0, 1)[1:, :, 2:] * 3, (x,)),
        (lambda a, i: a[0].gather(1, i.expand(4, 4)[:, :4].clamp(max=4)), (x, idx)),
        (lambda a: a[1, 2, 3] + a[0, 0], (x,)),
        (lambda a, i: torch.cat([a[:, 1], a[:, 3].t().t()], dim=0) + i.float().sum(), (x, idx)),
        (lambda a: a.transpose(0, 2).contiguous().mul_(2).exp(), (x,)),
    ]
    for fn, args in cases:
        for _ in range(2):
            _same(fn(*(a.to(DEV) for a in args)), fn(*args))
    assert mod.reused_aliases() > before
    y = t.index_select(1, ti)
    del t, ti, y
    # a pooled alias keeps no tpx memory alive and counts no bytes
    assert torch.tpx.memory_allocated() == base


def test_an_in_place_update_through_a_reused_alias_reaches_the_callers_tensor() -> None:
    mod = _ext.get()
    a = torch.zeros(4, 3, device=DEV)
    b = torch.ones(2, 3, device=DEV)
    a.add_(b[0])[:2] * b  # the aliases of a and b go back to the pool
    before = mod.reused_aliases()
    view = a[1:3]
    r = view.add_(b)  # the view's alias is a reused one
    assert mod.reused_aliases() >= before + 2
    assert r is view
    assert torch.equal(a.cpu(), torch.tensor([[1.0] * 3, [2.0] * 3, [2.0] * 3, [1.0] * 3]))


def test_aliases_made_in_inference_mode_are_not_pooled() -> None:
    mod = _ext.get()
    x = torch.randn(5, 4, generator=_g(3))
    t = x.to(DEV)
    with torch.inference_mode():
        before = mod.reused_aliases()
        for _ in range(3):
            _same(torch.tanh(t) + t, torch.tanh(x) + x)
        assert mod.reused_aliases() == before
    _same(torch.tanh(t) + t, torch.tanh(x) + x)  # and outside it the pool serves again


def test_a_fallback_configuration_change_reaches_a_thread_that_already_ran_the_op(tpx_config: Any,
                                                                                  fresh_stats: Any) -> None:
    # Whether an op is a configured fallback op is kept per op (shared by all threads) until the
    # configuration changes: a thread that ran the op before the change must see the change.
    import threading

    x = torch.ones(3, 4, device=DEV)
    idx = torch.tensor([2, 0], device=DEV)
    go, done = threading.Event(), threading.Event()
    seen: list[object] = []

    def worker() -> None:
        seen.append(x.index_select(0, idx).cpu())  # before the change: an ordinary op
        go.wait(10)
        try:
            x.index_select(0, idx)
            seen.append("ran")
        except RuntimeError as e:
            seen.append(str(e))
        done.set()

    t = threading.Thread(target=worker)
    t.start()
    while not seen and t.is_alive():
        t.join(0.01)
    tpx_config(fallback_ops="+index_select", warn_fallback=False, strict=True)
    go.set()
    assert done.wait(10)
    t.join(10)
    assert torch.equal(seen[0], torch.ones(2, 4))
    assert isinstance(seen[1], str) and "index_select" in seen[1]  # strict mode refused it there
    # and back on this thread: not strict, the unboxed kernel runs it as a counted fallback
    tpx_config(strict=False)
    fresh_stats.reset()
    x.index_select(0, idx)
    assert fresh_stats.snapshot()["cpu_fallback_ops"] == {"aten::index_select": 1}
    tpx_config(fallback_ops="-index_select")
    fresh_stats.reset()
    x.index_select(0, idx)
    assert fresh_stats.snapshot()["cpu_fallback_ops"] == {}


def test_adopted_results_carry_every_tpx_key_on_every_device() -> None:
    # an adopted result's dispatch keys are set from a precomputed set: they must be those of a tpx
    # tensor from the allocator (autocast and autograd included) on every device index
    mod = _ext.get()
    for i in range(min(torch.tpx.device_count(), 2)):
        dev = torch.device(DEV, i)
        x = torch.ones(4, 4, device=dev)
        before = mod.adopted_results()
        y = x * 2
        assert mod.adopted_results() == before + 1
        assert y.device == dev and y.untyped_storage().device == dev
        assert torch._C._dispatch_keys(y) == torch._C._dispatch_keys(torch.empty(4, 4, device=dev))
        with torch.autocast(DEV, dtype=torch.bfloat16):
            assert (y @ y).dtype == torch.bfloat16  # AutocastPrivateUse1 is among its keys
        w = y.requires_grad_()
        (w * w).sum().backward()
        assert torch.equal(w.grad.cpu(), torch.full((4, 4), 4.0))
