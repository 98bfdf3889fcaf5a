"""Fused LSTM/GRU cell kernels for tpx.

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


def register(lib) -> None:
    lib.impl("_thnn_fused_lstm_cell", lstm_cell, "PrivateUse1")
    lib.impl("_thnn_fused_lstm_cell_backward_impl", lstm_cell_backward, "PrivateUse1")
    lib.impl("_thnn_fused_gru_cell", gru_cell, "PrivateUse1")
    lib.impl("_thnn_fused_gru_cell_backward", gru_cell_backward, "PrivateUse1")
