"""CUDA's autocast cast policy: its op tables and the casts its kernels make, for any device type.

The tables are CUDA's (PyTorch's autocast docs, ``autocast_mode.cpp``), the policy users migrate from.
tpx's autocast kernels (``backend/autocast.py``) follow it, and so does a CUDA autocast that the CPU
reference run's redirect mapped to the CPU (``tools/redirect/amp_policy.py``):

* lower precision (cast float inputs to the autocast dtype): matmuls, convolutions, linear,
  attention, RNN cells;
* float32 (cast reduced-precision inputs up; the softmax/sum family gets a float32 result): pointwise
  transcendental ops, norms, softmax family, losses, reductions that overflow in half precision;
* promote (cast all float inputs to the widest float dtype among them): cat, stack, addcmul...
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from typing import Any

import torch

logger = logging.getLogger(__name__)

# CUDA's "lower precision" ops (cast float inputs to the autocast dtype).
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
# CUDA's float32 ops (reduced-precision inputs cast up).
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
# CUDA's "promote" ops (float inputs cast to the widest float dtype among them).
PROMOTE: tuple[str, ...] = (
    "addcdiv.default", "addcmul.default", "atan2.default", "bilinear.default", "cross.default",
    "dot.default", "grid_sampler.default", "index_put.default", "scatter_add.default",
    "tensordot.default", "cat.default", "stack.default",
)
# (ops, policy): "lower", "fp32" or "promote"
POLICIES: tuple[tuple[tuple[str, ...], str], ...] = ((LOWER_PRECISION, "lower"), (FLOAT32, "fp32"),
                                                     (PROMOTE, "promote"))

_FLOATS = (torch.float32, torch.float16, torch.bfloat16)
_WIDTH = {torch.bfloat16: 0, torch.float16: 0, torch.float32: 1}


def _aten_op(qualname: str) -> Any:
    """``torch.ops.aten.<name>.<overload>`` for ``"name.overload"``; None when this torch has no such op."""
    name, overload = qualname.split(".")
    packet = getattr(torch.ops.aten, name, None)
    return None if packet is None else getattr(packet, overload, None)


def policy_ops() -> Iterator[tuple[str, Any, str]]:
    """``(qualname, op, policy)`` for every op of the tables that this torch has."""
    for names, policy in POLICIES:
        for qual in names:
            op = _aten_op(qual)
            if op is None:
                logger.debug("autocast policy: no aten op %s in this torch", qual)
                continue
            yield qual, op, policy


def _cast(value: Any, dtype: torch.dtype, device_type: str) -> Any:
    if isinstance(value, torch.Tensor):
        if value.dtype in _FLOATS and value.dtype is not dtype and value.device.type == device_type:
            return value.to(dtype)
        return value
    if isinstance(value, (list, tuple)):
        return type(value)(_cast(v, dtype, device_type) for v in value)
    return value


def _widest(values: list[Any], device_type: str) -> torch.dtype | None:
    best: torch.dtype | None = None
    stack = list(values)
    while stack:
        x = stack.pop()
        if isinstance(x, torch.Tensor) and x.dtype in _WIDTH and x.device.type == device_type:
            if best is None or _WIDTH[x.dtype] > _WIDTH[best]:
                best = x.dtype
        elif isinstance(x, (list, tuple)):
            stack.extend(x)
    return best


def cast_inputs(policy: str, device_type: str, args: tuple[Any, ...],
                kwargs: dict[str, Any]) -> tuple[tuple[Any, ...], dict[str, Any]]:
    """An op's arguments as CUDA's autocast kernel of ``policy`` casts them, for the float tensors on
    ``device_type`` (others are left alone); the lower-precision dtype is that device's autocast dtype."""
    if policy == "lower":
        dtype: torch.dtype | None = torch.get_autocast_dtype(device_type)
    elif policy == "fp32":
        dtype = torch.float32
    else:
        dtype = _widest([*args, *kwargs.values()], device_type)
    if dtype is None:
        return args, kwargs
    return _cast(args, dtype, device_type), {k: _cast(v, dtype, device_type) for k, v in kwargs.items()}
