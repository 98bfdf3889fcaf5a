"""Fused bias + GELU (tanh approximation).

On a GPU the op is a custom CUDA kernel (csrc/), JIT-compiled on first import. Without a GPU,
or when the build fails (no nvcc, a toolkit that does not match), or with FUSED_OPS=0, the
pure-PyTorch reference below is used; it computes the same function.
"""

import os
import warnings

import torch
from torch.utils.cpp_extension import load

_HERE = os.path.dirname(os.path.abspath(__file__))
_ext = None

if torch.cuda.is_available() and os.environ.get("FUSED_OPS", "1") != "0":
    try:
        _ext = load(
            name="fused_bias_gelu",
            sources=[
                os.path.join(_HERE, "csrc", "fused_bias_gelu.cpp"),
                os.path.join(_HERE, "csrc", "fused_bias_gelu_kernel.cu"),
            ],
            extra_cuda_cflags=["-O3", "--use_fast_math"],
            verbose=False,
        )
    except (OSError, RuntimeError) as err:
        warnings.warn(f"fused_bias_gelu: CUDA extension unavailable ({err}); using the PyTorch reference")


def extension_loaded() -> bool:
    return _ext is not None


def bias_gelu_reference(x: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
    y = x + bias
    return 0.5 * y * (1.0 + torch.tanh(0.7978845608028654 * (y + 0.044715 * y * y * y)))


class _FusedBiasGelu(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, bias):
        x, bias = x.contiguous(), bias.contiguous()
        ctx.save_for_backward(x, bias)
        return _ext.forward(x, bias)

    @staticmethod
    def backward(ctx, grad):
        x, bias = ctx.saved_tensors
        dx = _ext.backward(grad.contiguous(), x, bias)
        return dx, dx.reshape(-1, bias.numel()).sum(dim=0)


def bias_gelu(x: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
    if _ext is not None and x.is_cuda:
        return _FusedBiasGelu.apply(x, bias)
    return bias_gelu_reference(x, bias)
