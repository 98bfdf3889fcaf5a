"""Counts the aten ops a profiled run dispatched, by the device they ran on (tpx or not).

The evidence that a migrated run did its work on the device (``ferry migrate`` will not call a
run ``migrated`` without it): a ``TorchDispatchMode`` sees every aten op below autograd and the
composite decompositions, the ops that reach a backend's kernels, CPU ones included. An op counts
as a tpx op when one of its tensor arguments (or its ``device=``) is on tpx. The ops a tpx kernel
runs on its CPU aliases are not seen (the mode is off while the op it intercepted runs), and
torch.compile compiles as it does without it (``ignore_compile_internals``). A tpx compiled graph runs
on CPU views of its tpx inputs (``backend/compile.py``): the aten ops it calls meanwhile (Inductor's
extern kernels: ``aten::mm``, convolutions, attention) are tpx's work and count as tpx ops.

The counter is on from the profile hook's installation until the profiler window closes (warm-up
plus ``FERRY_PROFILE_STEPS`` steps), or the whole run when the program has no steps (no module
calls, no optimizer): its cost (about 70-80 us per op on a loaded 2-core machine) is bounded by
that window. Measurements: docs/agent.md, "Verdict rules".
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Callable
from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode, _get_current_dispatch_mode

from ..guest import tpx_backend_module

logger = logging.getLogger(__name__)

TPX = "tpx"
#: The model's compute: matrix products, convolutions, attention, fused recurrent cells, embedding
#: lookups and the log-softmax / NLL of its loss (their backward ops too). A program whose model runs
#: on the device runs these there, whatever its host side does (data generation, slicing batches out
#: of a corpus, augmentation, checkpoint I/O, metrics), so their share is the verdict's measure when
#: the run has any (docs/agent.md, "Verdict rules"). A bigram language model has no matmul at all:
#: its work is an embedding and a cross-entropy.
COMPUTE_OPS = frozenset({
    "aten::mm", "aten::addmm", "aten::bmm", "aten::baddbmm", "aten::addbmm", "aten::addmv", "aten::mv",
    "aten::dot", "aten::convolution", "aten::_convolution", "aten::convolution_backward",
    "aten::lstm", "aten::gru", "aten::rnn_tanh", "aten::rnn_relu", "aten::_thnn_fused_lstm_cell",
    "aten::_thnn_fused_gru_cell", "aten::mkldnn_rnn_layer", "aten::_cudnn_rnn",
    "aten::embedding", "aten::embedding_dense_backward", "aten::_embedding_bag", "aten::_embedding_bag_backward",
    "aten::_log_softmax", "aten::_log_softmax_backward_data", "aten::nll_loss_forward", "aten::nll_loss_backward",
    "aten::nll_loss2d_forward", "aten::nll_loss2d_backward",
})
COMPUTE_PREFIXES = ("aten::_scaled_dot_product", "aten::_flash_attention", "aten::_efficient_attention")


def is_compute(name: str) -> bool:
    return name in COMPUTE_OPS or name.startswith(COMPUTE_PREFIXES)
_Tensor = torch.Tensor


def _device_type(args: tuple[Any, ...], kwargs: dict[str, Any]) -> str | None:
    """The device type of the op's first tensor argument (one level into lists), else its ``device=``."""
    for a in args:
        if isinstance(a, _Tensor):
            return a.device.type
        if isinstance(a, (list, tuple)):
            for b in a:
                if isinstance(b, _Tensor):
                    return b.device.type
    for v in kwargs.values():
        if isinstance(v, _Tensor):
            return v.device.type
    dev = kwargs.get("device")
    if isinstance(dev, torch.device):
        return dev.type
    if isinstance(dev, str):
        return dev.split(":", 1)[0]
    return None


class DeviceOpCounter(TorchDispatchMode):  # type: ignore[no-untyped-call]  # untyped in torch
    """``tpx`` / ``other`` op counts while ``counting``; ``stop()`` ends counting (and leaves the mode
    stack when it is on top: a mode the program pushed later stays where it is)."""

    def __init__(self) -> None:
        super().__init__()  # type: ignore[no-untyped-call]  # untyped in torch
        self.tpx = 0
        self.other = 0
        self.counting = True
        self.entered = False
        self.started = False
        self.before_tpx = 0
        self.compute_tpx = 0
        self.compute_other = 0
        self._compute: dict[Any, bool] = {}  # op overload -> is_compute, looked up once per op
        self._graph_probe: Callable[[], bool] | None = None  # backend.compile.in_compiled_graph, once loaded

    @classmethod
    def ignore_compile_internals(cls) -> bool:
        """torch.compile compiles as it would without the counter (it is off while dynamo traces;
        a compiled artifact's ops are counted as they run)."""
        return True

    def __torch_dispatch__(self, func: Any, types: Any, args: tuple[Any, ...] = (),
                           kwargs: dict[str, Any] | None = None) -> Any:
        kwargs = kwargs or {}
        if self.counting:
            compute = self._compute.get(func)
            if compute is None:
                compute = self._compute[func] = is_compute(getattr(getattr(func, "_schema", None), "name", ""))
            if _device_type(args, kwargs) == TPX or self._in_tpx_graph():
                if not self.tpx:
                    self.before_tpx = self.other  # set-up: weight init, data made before the move
                self.tpx += 1
                self.compute_tpx += compute
            else:
                self.other += 1
                self.compute_other += compute
        return func(*args, **kwargs)

    def _in_tpx_graph(self) -> bool:
        if self._graph_probe is None:
            module = tpx_backend_module("compile")  # loaded with tpx; None in a CPU run (never imported here)
            if module is None:
                return False
            self._graph_probe = getattr(module, "in_compiled_graph", None) or (lambda: False)
        return bool(self._graph_probe())

    def start(self) -> DeviceOpCounter:
        try:
            self.__enter__()  # type: ignore[no-untyped-call]  # untyped in torch
            self.entered = self.started = True
        except Exception:  # e.g. under a tracing mode that refuses another
            logger.warning("profile: the device op counter could not start", exc_info=True)
            self.counting = False
        return self

    def stop(self) -> None:
        self.counting = False
        if self.entered and _get_current_dispatch_mode() is self:
            self.__exit__(None, None, None)  # type: ignore[no-untyped-call]  # untyped in torch
            self.entered = False

    def snapshot(self) -> dict[str, int] | None:
        """``{"tpx": N, "other": M, "before_tpx": K, "compute_tpx": C, "compute_other": D}`` (K of the M
        came before the first tpx op; C and D: the model's compute ops, ``COMPUTE_OPS``), None when the
        counter never ran."""
        if not self.started:
            return None
        return {"tpx": self.tpx, "other": self.other, "before_tpx": self.before_tpx if self.tpx else self.other,
                "compute_tpx": self.compute_tpx, "compute_other": self.compute_other}


def _dynamo_disable_when_loaded(mode: type) -> None:
    """PyTorch wraps a dispatch mode's ``__torch_dispatch__`` so that dynamo never traces it, and that wrapper
    imports ``torch._dynamo`` (a second or two) at the mode's first op, in every profiled run, also where the
    program never compiles. The wrapper takes the disabled function from the raw one's ``__dynamo_disable``
    when set: this one calls the raw function while dynamo is not loaded (nothing can be compiling then) and
    dynamo's own ``disable`` of it from the moment it is (the program's ``torch.compile``), as torch would."""
    raw = getattr(mode.__dict__.get("__torch_dispatch__"), "__wrapped__", None)
    if raw is None or not callable(raw):
        return
    real: list[Callable[..., Any]] = []

    def disabled(*args: Any, **kwargs: Any) -> Any:
        if real:
            return real[0](*args, **kwargs)
        dynamo = sys.modules.get("torch._dynamo")
        disable = getattr(dynamo, "disable", None) if dynamo is not None else None
        if disable is None:
            return raw(*args, **kwargs)
        real.append(disable(raw, True, wrapping=False))
        return real[0](*args, **kwargs)

    try:
        setattr(raw, "__dynamo_disable", disabled)
    except (AttributeError, TypeError):
        logger.debug("profile: the op counter's dynamo wrapper left as torch made it")


_dynamo_disable_when_loaded(DeviceOpCounter)
