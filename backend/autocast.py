"""``torch.autocast("tpx", dtype=torch.bfloat16)``: the per-op cast policy.

PyTorch 2.13 registers autocast kernels for CUDA/CPU/XPU/MPS but none for PrivateUse1, so
under ``torch.autocast("tpx")`` nothing would be cast. These Python kernels on the
``AutocastPrivateUse1`` key follow CUDA's policy (the one users migrate from):

* lower precision (cast float inputs to the autocast dtype): matmuls, convolutions, linear,
  attention, RNN cells;
* float32 (cast reduced-precision inputs up): pointwise transcendental ops, norms, softmax
  family, losses, reductions that overflow in half precision;
* promote (cast all float inputs to the widest float dtype among them): cat, stack, addcmul...

Ops not listed run in whatever dtype their inputs have. ``TPX_AUTOCAST=off`` makes every region cast
nothing (parity's side run against the fp32 golden run of the original, whose CUDA autocast is off).
"""

from __future__ import annotations

import logging

import torch

logger = logging.getLogger(__name__)

LOWER_PRECISION: tuple[str, ...] = (
    "_convolution.default", "conv1d.default", "conv2d.default", "conv3d.default", "conv_tbc.default",
    "conv_transpose1d.default", "conv_transpose2d.input", "conv_transpose3d.input",
    "convolution.default", "prelu.default", "addmm.default", "addmv.default", "addr.default",
    "matmul.default", "einsum.default", "mm.default", "mv.default", "linear.default",
    "addbmm.default", "baddbmm.default", "bmm.default", "chain_matmul.default",
    "linalg_multi_dot.default", "_thnn_fused_lstm_cell.default", "_thnn_fused_gru_cell.default",
    "lstm_cell.default", "gru_cell.default", "rnn_tanh_cell.default", "rnn_relu_cell.default",
    "scaled_dot_product_attention.default",
)

FLOAT32: tuple[str, ...] = (
    "acos.default", "asin.default", "cosh.default", "erfinv.default", "exp.default", "expm1.default",
    "log.default", "log10.default", "log2.default", "log1p.default", "reciprocal.default",
    "rsqrt.default", "sinh.default", "tan.default", "pow.Tensor_Scalar", "pow.Tensor_Tensor",
    "pow.Scalar", "softplus.default", "layer_norm.default", "native_layer_norm.default",
    "group_norm.default", "frobenius_norm.dim", "nuclear_norm.default", "cosine_similarity.default",
    "poisson_nll_loss.default", "cosine_embedding_loss.default", "nll_loss.default",
    "nll_loss2d.default", "hinge_embedding_loss.default", "kl_div.default", "l1_loss.default",
    "smooth_l1_loss.default", "huber_loss.default", "mse_loss.default", "margin_ranking_loss.default",
    "multilabel_margin_loss.default", "soft_margin_loss.default", "triplet_margin_loss.default",
    "multi_margin_loss.default", "binary_cross_entropy_with_logits.default", "dist.default",
    "pdist.default", "cdist.default", "renorm.default", "logsumexp.default",
    "softmax.int", "log_softmax.int", "cumprod.default", "cumsum.default", "prod.default",
    "sum.default", "sum.dim_IntList", "linalg_vector_norm.default", "cross_entropy_loss.default",
)

PROMOTE: tuple[str, ...] = (
    "addcdiv.default", "addcmul.default", "atan2.default", "bilinear.default", "cross.default",
    "dot.default", "grid_sampler.default", "index_put.default", "scatter_add.default",
    "tensordot.default", "cat.default", "stack.default",
)

_FLOATS = (torch.float32, torch.float16, torch.bfloat16)
_KEYSET = None
_OFF: list[bool] = [False]  # TPX_AUTOCAST=off (kept current by register's config listener)


def _exclude():
    return torch._C._ExcludeDispatchKeyGuard(_KEYSET)


def _cast(x, dtype):
    if isinstance(x, torch.Tensor):
        if x.dtype in _FLOATS and x.dtype is not dtype and x.device.type == "tpx":
            return x.to(dtype)
        return x
    if isinstance(x, (list, tuple)):
        return type(x)(_cast(v, dtype) for v in x)
    return x


def _widest(args) -> torch.dtype | None:
    best = None
    order = {torch.bfloat16: 0, torch.float16: 0, torch.float32: 1}
    stack = list(args)
    while stack:
        x = stack.pop()
        if isinstance(x, torch.Tensor) and x.dtype in order and x.device.type == "tpx":
            if best is None or order[x.dtype] > order[best]:
                best = x.dtype
        elif isinstance(x, (list, tuple)):
            stack.extend(x)
    return best


def _op(qualname: str):
    name, overload = qualname.split(".")
    packet = getattr(torch.ops.aten, name, None)
    return None if packet is None else getattr(packet, overload, None)


def _make(op, policy: str):
    def kernel(*args, **kwargs):
        with _exclude():
            if _OFF[0]:
                return op(*args, **kwargs)
            if policy == "lower":
                dtype = torch.get_autocast_dtype("tpx")
            elif policy == "fp32":
                dtype = torch.float32
            else:
                dtype = _widest(list(args) + list(kwargs.values()))
            if dtype is not None:
                args = _cast(args, dtype)
                kwargs = {k: _cast(v, dtype) for k, v in kwargs.items()}
            return op(*args, **kwargs)

    return kernel


def _apply_config(cfg) -> None:
    _OFF[0] = cfg.autocast == "off"


def register(libs: list) -> None:
    global _KEYSET
    from . import config

    config.on_change(_apply_config)
    _KEYSET = torch._C.DispatchKeySet(torch._C.DispatchKey.AutocastPrivateUse1)
    lib = torch.library.Library("aten", "IMPL")
    for names, policy in ((LOWER_PRECISION, "lower"), (FLOAT32, "fp32"), (PROMOTE, "promote")):
        for qual in names:
            op = _op(qual)
            if op is None:
                logger.debug("autocast: no aten op %s in this torch", qual)
                continue
            try:
                lib.impl(op, _make(op, policy), "AutocastPrivateUse1")
            except RuntimeError as exc:
                logger.debug("autocast: cannot register %s: %s", qual, exc)
    libs.append(lib)
