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
CUDA lists too). The op tables and the casts are CUDA's, shared with tpx's autocast
(``cuda_semantics/autocast.py``).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import torch

from ..guest import sibling

if TYPE_CHECKING:
    from cuda_semantics import autocast as _policy
else:  # CUDA's op tables and casts, shared with tpx's autocast, under the root this code runs under
    _policy = sibling("cuda_semantics.autocast")

logger = logging.getLogger(__name__)

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


def _kernel(op: Any, policy: str, keyset: torch._C.DispatchKeySet, composite: bool) -> Callable[..., Any]:
    def kernel(*args: Any, **kwargs: Any) -> Any:
        redirected = in_region()  # read before the guard: autocast counts as off while its key is excluded
        if not redirected and composite:
            # the fallthrough this kernel replaces: the op's decomposition, whose own ops autocast as usual
            return op.decompose(*args, **kwargs)
        with torch._C._ExcludeDispatchKeyGuard(keyset):  # as CUDA's kernels: the op's own ops see no autocast
            if redirected:
                args, kwargs = _policy.cast_inputs(policy, "cpu", args, kwargs)
            return op(*args, **kwargs)

    return kernel


def install() -> list[str]:
    """Register the kernels (once per process); the ops whose CPU autocast policy now follows
    CUDA's inside redirected regions, as ``aten::name.overload``."""
    if _libs:
        return list(_applied)
    keyset = torch._C.DispatchKeySet(torch._C.DispatchKey.AutocastCPU)
    lib = torch.library.Library("aten", "IMPL")  # type: ignore[no-untyped-call]  # untyped in torch
    for qual, op, policy in _policy.policy_ops():
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
