"""CUDA's autocast cast policy inside a CUDA autocast that the redirect mapped to the CPU.

A CUDA program under ``torch.autocast("cuda")`` was written for CUDA's cast policy, and the
target (tpx, ``backend/autocast.py``) follows it. CPU autocast's own policy differs: it keeps
softmax, log_softmax, layer_norm, group_norm, exp, log, pow, cumsum, sum... in the autocast dtype
where CUDA computes them in float32, and lowers fewer ops (no einsum, mv, addmv, RNN cells). The
reference run would then compute something else than the program means (float16 after every
softmax where the target has float32), and parity would compare two cast policies instead of two
devices.

:func:`install` registers Python kernels on the ``AutocastCPU`` key for the ops of CUDA's policy
that CPU autocast has no kernel for (their CPU behaviour is a fallthrough: run in whatever dtype
the inputs have, a composite op's own ops autocast one by one). Inside a redirected region (an
autocast the program opened for CUDA, :func:`enter_region`/:func:`exit_region`, per thread) a
kernel casts as CUDA's kernels do; outside it (the program's own ``torch.autocast("cpu")``) it does
what the fallthrough it replaces did: a composite op runs its decomposition, any other op runs
unchanged. Ops CPU autocast has a kernel for keep CPU's (the same lower/fp32 class for all that
CUDA lists too). The op tables are CUDA's (PyTorch's autocast docs, ``autocast_mode.cpp``) and
the same as tpx's (tests/redirect checks the two agree).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
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
# CUDA's float32 ops (reduced-precision inputs cast up; the softmax/sum family gets a float32 result).
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
POLICIES: tuple[tuple[tuple[str, ...], str], ...] = ((LOWER_PRECISION, "lower"), (FLOAT32, "fp32"),
                                                     (PROMOTE, "promote"))

_FLOATS = (torch.float32, torch.float16, torch.bfloat16)
_WIDTH = {torch.bfloat16: 0, torch.float16: 0, torch.float32: 1}
_region = threading.local()  # autocast state is per thread, so is the redirected region
_libs: list[torch.library.Library] = []  # kept alive: a dropped Library unregisters its kernels
_applied: list[str] = []


def enter_region() -> None:
    """A CUDA autocast mapped to the CPU was entered on this thread."""
    _region.depth = getattr(_region, "depth", 0) + 1


def exit_region() -> None:
    _region.depth = max(0, getattr(_region, "depth", 1) - 1)


def in_region() -> bool:
    """Whether this thread is inside a redirected CUDA autocast that is enabled on the CPU."""
    return getattr(_region, "depth", 0) > 0 and torch.is_autocast_enabled("cpu")


def _cast(value: Any, dtype: torch.dtype) -> Any:
    if isinstance(value, torch.Tensor):
        if value.dtype in _FLOATS and value.dtype is not dtype and value.device.type == "cpu":
            return value.to(dtype)
        return value
    if isinstance(value, (list, tuple)):
        return type(value)(_cast(v, dtype) for v in value)
    return value


def _widest(values: list[Any]) -> torch.dtype | None:
    best: torch.dtype | None = None
    stack = list(values)
    while stack:
        x = stack.pop()
        if isinstance(x, torch.Tensor) and x.dtype in _WIDTH and x.device.type == "cpu":
            if best is None or _WIDTH[x.dtype] > _WIDTH[best]:
                best = x.dtype
        elif isinstance(x, (list, tuple)):
            stack.extend(x)
    return best


def _op(qualname: str) -> Any:
    name, overload = qualname.split(".")
    packet = getattr(torch.ops.aten, name, None)
    return None if packet is None else getattr(packet, overload, None)


def _kernel(op: Any, policy: str, keyset: torch._C.DispatchKeySet, composite: bool) -> Callable[..., Any]:
    def kernel(*args: Any, **kwargs: Any) -> Any:
        redirected = in_region()  # read before the guard: autocast counts as off while its key is excluded
        if not redirected and composite:
            # the fallthrough this kernel replaces: the op's decomposition, whose own ops autocast as usual
            return op.decompose(*args, **kwargs)
        with torch._C._ExcludeDispatchKeyGuard(keyset):  # as CUDA's kernels: the op's own ops see no autocast
            if redirected:
                if policy == "lower":
                    dtype: torch.dtype | None = torch.get_autocast_dtype("cpu")
                elif policy == "fp32":
                    dtype = torch.float32
                else:
                    dtype = _widest([*args, *kwargs.values()])
                if dtype is not None:
                    args = _cast(args, dtype)
                    kwargs = {k: _cast(v, dtype) for k, v in kwargs.items()}
            return op(*args, **kwargs)

    return kernel


def install() -> list[str]:
    """Register the kernels (once per process); the ops whose CPU autocast policy now follows
    CUDA's inside redirected regions, as ``aten::name.overload``."""
    if _libs:
        return list(_applied)
    keyset = torch._C.DispatchKeySet(torch._C.DispatchKey.AutocastCPU)
    lib = torch.library.Library("aten", "IMPL")  # type: ignore[no-untyped-call]  # untyped in torch
    for names, policy in POLICIES:
        for qual in names:
            op = _op(qual)
            if op is None:
                logger.debug("autocast policy: no aten op %s in this torch", qual)
                continue
            schema = f"aten::{qual.removesuffix('.default')}"
            if torch._C._dispatch_has_kernel_for_dispatch_key(schema, "AutocastCPU"):
                continue  # CPU autocast's own kernel: the program's CPU regions keep it, so do ours
            composite = torch._C._dispatch_has_kernel_for_dispatch_key(schema, "CompositeImplicitAutograd")
            try:
                lib.impl(op, _kernel(op, policy, keyset, composite), "AutocastCPU")  # type: ignore[no-untyped-call]
            except RuntimeError as exc:
                logger.debug("autocast policy: cannot register %s: %s", qual, exc)
                continue
            _applied.append(schema)
    _libs.append(lib)
    return list(_applied)
