"""Mixed-precision helpers: the scoped float64 permission GradScaler needs on tpx."""

from __future__ import annotations

import contextlib

from . import _ext, kernels


@contextlib.contextmanager
def float64_scope():
    """Allow float64 tensors on tpx inside the block (used only around GradScaler.unscale_,
    which computes ``scale.double().reciprocal().float()`` on the device). User code outside
    the block still gets the no-float64 TypeError."""
    ext = _ext.get()
    kernels.S.f64_depth += 1
    ext.float64_scope_enter()
    try:
        yield
    finally:
        ext.float64_scope_exit()
        kernels.S.f64_depth -= 1
