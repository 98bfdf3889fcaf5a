"""``torch.autocast("tpx", dtype=torch.bfloat16)``: the per-op cast policy.

PyTorch 2.13 registers autocast kernels for CUDA/CPU/XPU/MPS but none for PrivateUse1, so
under ``torch.autocast("tpx")`` nothing would be cast. These Python kernels on the
``AutocastPrivateUse1`` key follow CUDA's policy (the one users migrate from; its tables are in
``cuda_semantics/autocast.py``, shared with the CPU reference run's redirect):

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

from ._siblings import sibling

logger = logging.getLogger(__name__)

_policy = sibling("cuda_semantics.autocast")  # CUDA's op tables and casts, shared with the CPU redirect

_KEYSET = None
_OFF: list[bool] = [False]  # TPX_AUTOCAST=off (kept current by register's config listener)


def _exclude():
    return torch._C._ExcludeDispatchKeyGuard(_KEYSET)


def _make(op, policy: str):
    def kernel(*args, **kwargs):
        with _exclude():
            if _OFF[0]:
                return op(*args, **kwargs)
            args, kwargs = _policy.cast_inputs(policy, "tpx", args, kwargs)
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
    for qual, op, policy in _policy.policy_ops():
        try:
            lib.impl(op, _make(op, policy), "AutocastPrivateUse1")
        except RuntimeError as exc:
            logger.debug("autocast: cannot register %s: %s", qual, exc)
    libs.append(lib)
