"""Fused LSTM/GRU cell kernels for tpx (Python; tpx_dispatch.cpp has the same cells in C++).

PyTorch's LSTM/GRU take the fused-cell path on accelerators (CUDA, XPU, PrivateUse1), and the
CPU build has no kernels for those ops, so the generic CPU fallback cannot run them. These are
the same cell equations computed with CPU ops on zero-copy aliases; the workspace layouts
(activated gates) are this module's own and only read by its backward kernels.
"""

from __future__ import annotations

import torch

from . import kernels, stats


def _c(t):
    return kernels._to_cpu(t) if t is not None else None


def _t(t, index):
    """A CPU result as a tpx tensor on ``tpx:index`` (the device of the kernel's inputs)."""
    return kernels._from_cpu(t.contiguous(), index)


def lstm_cell(input_gates, hidden_gates, cx, input_bias=None, hidden_bias=None):
    t0 = kernels._perf_ns()
    gates = _c(input_gates) + _c(hidden_gates)
    if input_bias is not None:
        gates = gates + _c(input_bias)
    if hidden_bias is not None:
        gates = gates + _c(hidden_bias)
    i, f, g, o = gates.chunk(4, 1)
    i, f, g, o = i.sigmoid(), f.sigmoid(), g.tanh(), o.sigmoid()
    cy = f * _c(cx) + i * g
    hy = o * cy.tanh()
    workspace = torch.cat([i, f, g, o], 1)
    stats.record_op("aten::_thnn_fused_lstm_cell", kernels._perf_ns() - t0)
    dev = input_gates.get_device()
    return _t(hy, dev), _t(cy, dev), _t(workspace, dev)


def lstm_cell_backward(grad_hy, grad_cy, cx, cy, workspace, has_bias):
    t0 = kernels._perf_ns()
    i, f, g, o = _c(workspace).chunk(4, 1)
    cx_, cy_ = _c(cx), _c(cy)
    tanh_cy = cy_.tanh()
    d_cy = torch.zeros_like(cy_)
    d_o = torch.zeros_like(cy_)
    if grad_hy is not None:
        gh = _c(grad_hy)
        d_cy = d_cy + gh * o * (1 - tanh_cy * tanh_cy)
        d_o = gh * tanh_cy * o * (1 - o)
    if grad_cy is not None:
        d_cy = d_cy + _c(grad_cy)
    d_i = d_cy * g * i * (1 - i)
    d_f = d_cy * cx_ * f * (1 - f)
    d_g = d_cy * i * (1 - g * g)
    grad_gates = torch.cat([d_i, d_f, d_g, d_o], 1)
    grad_cx = d_cy * f
    grad_bias = grad_gates.sum(0) if has_bias else torch.empty(0, dtype=grad_gates.dtype)
    stats.record_op("aten::_thnn_fused_lstm_cell_backward_impl", kernels._perf_ns() - t0)
    dev = workspace.get_device()
    return _t(grad_gates, dev), _t(grad_cx, dev), _t(grad_bias, dev)


def gru_cell(input_gates, hidden_gates, hx, input_bias=None, hidden_bias=None):
    t0 = kernels._perf_ns()
    ig, hg = _c(input_gates), _c(hidden_gates)
    if input_bias is not None:
        ig = ig + _c(input_bias)
    if hidden_bias is not None:
        hg = hg + _c(hidden_bias)
    ir, ii, in_ = ig.chunk(3, 1)
    hr, hi, hn = hg.chunk(3, 1)
    r = (ir + hr).sigmoid()
    z = (ii + hi).sigmoid()
    n = (in_ + r * hn).tanh()
    hx_ = _c(hx)
    hy = n + z * (hx_ - n)
    workspace = torch.cat([r, z, n, hx_, hn], 1)
    stats.record_op("aten::_thnn_fused_gru_cell", kernels._perf_ns() - t0)
    dev = input_gates.get_device()
    return _t(hy, dev), _t(workspace, dev)


def gru_cell_backward(grad_hy, workspace, has_bias):
    t0 = kernels._perf_ns()
    r, z, n, hx, hn = _c(workspace).chunk(5, 1)
    gh = _c(grad_hy)
    d_n = gh * (1 - z)
    d_z = gh * (hx - n)
    d_hx = gh * z
    d_npre = d_n * (1 - n * n)
    d_hn = d_npre * r
    d_rpre = d_npre * hn * r * (1 - r)
    d_zpre = d_z * z * (1 - z)
    grad_ig = torch.cat([d_rpre, d_zpre, d_npre], 1)
    grad_hg = torch.cat([d_rpre, d_zpre, d_hn], 1)
    empty = torch.empty(0, dtype=grad_ig.dtype)
    gib = grad_ig.sum(0) if has_bias else empty
    ghb = grad_hg.sum(0) if has_bias else empty
    stats.record_op("aten::_thnn_fused_gru_cell_backward", kernels._perf_ns() - t0)
    dev = workspace.get_device()
    return _t(grad_ig, dev), _t(grad_hg, dev), _t(d_hx, dev), _t(gib, dev), _t(ghb, dev)


def register(lib, key: str = "PrivateUse1") -> None:
    """Register the cells for ``key``: PrivateUse1 until the extension is built; with it, the
    C++ cells of tpx_dispatch.cpp take PrivateUse1 and hand these the profiled calls through
    ``_registration.PYTHON_KEY``."""
    lib.impl("_thnn_fused_lstm_cell", lstm_cell, key)
    lib.impl("_thnn_fused_lstm_cell_backward_impl", lstm_cell_backward, key)
    lib.impl("_thnn_fused_gru_cell", gru_cell, key)
    lib.impl("_thnn_fused_gru_cell_backward", gru_cell_backward, key)


# ---------------------------------------------------------------- whole LSTMs as the CPU runs them
# On a PrivateUse1 device ``aten::lstm`` decomposes into one fused cell per time step (a dozen tpx
# ops per step, forward and backward), while the CPU runs each layer as one fused kernel. With
# full-fp32 matmuls (the CPU's numbers are then what tpx must give), tpx runs the CPU's LSTM on
# zero-copy aliases, its autograd graph included: gradients cross back as tpx tensors.


class _CpuAliases(torch.autograd.Function):
    """tpx tensors -> CPU aliases (gradients: CPU -> tpx tensors over the same memory)."""

    @staticmethod
    def forward(ctx, index, *tensors):  # type: ignore[override]
        ctx.index = index
        return tuple(kernels._to_cpu(t) for t in tensors)

    @staticmethod
    def backward(ctx, *grads):  # type: ignore[override]
        return (None, *(kernels._from_cpu(g.contiguous(), ctx.index) if g is not None else None for g in grads))


class _TpxResults(torch.autograd.Function):
    """CPU results -> tpx tensors over the same memory (gradients: tpx -> CPU aliases)."""

    @staticmethod
    def forward(ctx, index, *tensors):  # type: ignore[override]
        return tuple(kernels._from_cpu(t, index) for t in tensors)

    @staticmethod
    def backward(ctx, *grads):  # type: ignore[override]
        return (None, *(kernels._to_cpu(g) if g is not None else None for g in grads))


_OTHER_KEYS: list = []  # [the DispatchKeySet of the keys that rule the CPU's LSTM out], built once
_PLAIN_TYPES = (torch.Tensor, torch.nn.Parameter)


def _other_keys():
    if not _OTHER_KEYS:
        k = torch._C.DispatchKey
        keys = torch._C.DispatchKeySet(k.Python)
        for n in ("Functionalize", "FuncTorchBatched", "FuncTorchGradWrapper", "Conjugate", "Negative"):
            if hasattr(k, n):
                keys = keys | torch._C.DispatchKeySet(getattr(k, n))
        _OTHER_KEYS.append(keys)
    return _OTHER_KEYS[0]


def _plain_tpx(ts) -> int:
    """The device index when every tensor is a plain float32 tpx tensor on one device, else -2."""
    other = _other_keys()
    index = -2
    for t in ts:
        if type(t) not in _PLAIN_TYPES or t.dtype != torch.float32:
            return -2
        d = t.device
        if d.type != "tpx" or (torch._C._dispatch_keys(t) & other).raw_repr():
            return -2
        i = d.index
        if index != -2 and i != index:
            return -2
        index = i
    return index


_lstm = torch.ops.aten.lstm.input
_COMPOSITE = torch._C.DispatchKey.CompositeImplicitAutograd


def lstm(input, hx, params, has_biases, num_layers, dropout, train, bidirectional, batch_first):
    """``aten::lstm.input`` for tpx's autograd key: the CPU's LSTM on zero-copy aliases when its
    numbers are the ones tpx gives (full-fp32 matmuls, no dropout draw, plain tpx tensors);
    otherwise PyTorch's decomposition into tpx's fused cells."""
    flat = [input, *hx, *params]
    index = -2 if kernels.S.matmul_bf16 or (train and dropout > 0) else _plain_tpx(flat)
    if index == -2 or torch._C._autograd._profiler_enabled():
        # the C++ composite kernel (decompose() would take torch._decomp's Python one)
        return _lstm._op_dk(_COMPOSITE, input, hx, params, has_biases, num_layers, dropout, train, bidirectional,
                            batch_first)
    t0 = kernels._perf_ns()
    aliases = _CpuAliases.apply(index, *flat)
    n = len(hx)
    out = torch.lstm(aliases[0], aliases[1:1 + n], aliases[1 + n:], has_biases, num_layers, dropout, train,
                     bidirectional, batch_first)
    res = _TpxResults.apply(index, *out)
    stats.record_op("aten::lstm", kernels._perf_ns() - t0)
    return res


def register_lstm(lib) -> None:
    lib.impl("lstm.input", lstm, "AutogradPrivateUse1")
