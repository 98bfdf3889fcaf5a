"""Replacements for ``torch.accelerator.*`` in the reference run (CUDA redirected to the CPU).

On a CUDA machine ``torch.accelerator`` answers for CUDA: ``is_available()`` is true,
``current_accelerator()`` is ``cuda``, ``device_count()`` counts the GPUs. Code written against
``torch.accelerator`` (pytorch/examples' distributed scripts, FSDP2) asks those questions first and
exits without working ("Unable to locate sufficient 2 gpus") when the CPU answers them. Under the
redirect the program must see the CUDA machine it was written for, as ``torch.cuda`` already shows
it (``cuda_api``): the answers below come from the same replacements (one device count, one current
ordinal, one synchronise), and the devices the program builds from them (``torch.device("cuda", i)``)
go to the redirect's target like any other CUDA device.

PyTorch's own calls (DataLoader's pin_memory, DTensor, FSDP) keep the real answers, as for
``torch.cuda``. Only the CPU target needs this: on tpx ``torch.accelerator`` answers for tpx itself.
Standard library and torch only: this runs inside the user's process.
"""

from __future__ import annotations

import contextlib
from typing import TYPE_CHECKING, Any

import torch

from .cuda_api import _from_torch_internals, answer_of
from .sites import SiteCounter

if TYPE_CHECKING:  # typing only: the sandboxed child imports no more than it needs
    from collections.abc import Callable, Iterator

#: answered at trace time under torch.compile, as their torch.cuda counterparts (dynamo_rules)
FOLDED = frozenset({"is_available", "device_count", "current_accelerator", "current_device_index",
                    "current_device_idx", "get_device_capability", "synchronize"})
#: the Dynamo module that folds the program's questions while it traces (the only one of Dynamo's asking for it)
_CONSTANT_FOLDER = "torch._dynamo.variables.torch"
#: the functions of torch.accelerator.memory, also re-exported by torch.accelerator
MEMORY = ("empty_cache", "empty_host_cache", "get_memory_info", "max_memory_allocated", "max_memory_reserved",
          "memory_allocated", "memory_reserved", "memory_stats", "reset_accumulated_memory_stats",
          "reset_peak_memory_stats")


def build_accelerator_api(cuda_api: dict[str, Any], rec: SiteCounter) -> dict[str, object]:
    """name -> replacement for ``torch.accelerator.<name>``, answering as ``cuda_api`` (torch.cuda's
    replacements) does. Each keeps the real function for PyTorch's own callers, and logs its call
    site once, as ``torch.accelerator``'s (the torch.cuda answers it uses log nothing)."""
    cuda_device = torch.device("cuda")
    cuda_api = {name: answer_of(fn) for name, fn in cuda_api.items()}

    def current_accelerator(check_available: bool = False) -> torch.device:
        return cuda_device

    def capability(device: object = None) -> dict[str, Any]:
        major, minor = cuda_api["get_device_capability"]()
        return {"major": major, "minor": minor}

    @contextlib.contextmanager
    def device_index(device: object) -> Iterator[None]:
        before = cuda_api["current_device"]()
        if device is not None:
            cuda_api["set_device"](device)
        try:
            yield
        finally:
            cuda_api["set_device"](before)

    def noop(*a: object, **k: object) -> None:
        return None

    answers: dict[str, Callable[..., Any]] = {
        "is_available": lambda: True,
        "device_count": cuda_api["device_count"],
        "current_accelerator": current_accelerator,
        "current_device_index": cuda_api["current_device"],
        "current_device_idx": cuda_api["current_device"],
        "set_device_index": cuda_api["set_device"],
        "set_device_idx": cuda_api["set_device"],
        "device_index": device_index,
        "get_device_capability": capability,
        "synchronize": cuda_api["synchronize"],
        "current_stream": cuda_api["current_stream"],
        "set_stream": noop,
        "empty_cache": cuda_api["empty_cache"],
        "empty_host_cache": noop,
        "get_memory_info": cuda_api["mem_get_info"],
        "max_memory_allocated": cuda_api["max_memory_allocated"],
        "max_memory_reserved": cuda_api["max_memory_reserved"],
        "memory_allocated": cuda_api["memory_allocated"],
        "memory_reserved": cuda_api["memory_reserved"],
        "memory_stats": cuda_api["memory_stats"],
        "reset_accumulated_memory_stats": noop,
        "reset_peak_memory_stats": cuda_api["reset_peak_memory_stats"],
    }
    api: dict[str, object] = {}
    for name, answer in answers.items():
        real = getattr(torch.accelerator, name, None)
        if real is None:
            continue
        api[name] = _redirected(name, real, answer, rec)
    return api


def _redirected(name: str, real: Callable[..., Any], answer: Callable[..., Any],
                rec: SiteCounter) -> Callable[..., Any]:
    def replacement(*args: Any, **kwargs: Any) -> Any:
        # only Dynamo's constant folder asks for the program: its stream handling (variables.streams)
        # asks is_available() and then uses current_accelerator(), and must get the real pair
        if _from_torch_internals(tracer=_CONSTANT_FOLDER):
            return real(*args, **kwargs)
        rec.record(f"torch.accelerator.{name}", skip=3)
        return answer(*args, **kwargs)

    replacement.__name__ = name
    replacement.__qualname__ = f"accelerator.{name}"
    replacement.__doc__ = real.__doc__
    return replacement


def install_accelerator_api(api: dict[str, object]) -> None:
    """Put the replacements on ``torch.accelerator`` (and its ``memory`` module, for the memory ones)."""
    memory = getattr(torch.accelerator, "memory", None)
    for name, fn in api.items():
        setattr(torch.accelerator, name, fn)
        if memory is not None and name in MEMORY and hasattr(memory, name):
            setattr(memory, name, fn)
