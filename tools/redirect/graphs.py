"""``torch.cuda.CUDAGraph`` / ``torch.cuda.graph`` on a device without CUDA graphs.

A CUDA graph replays the kernels it captured on the same memory. The stand-in does the same at
the level of PyTorch's ops: while capturing it runs the code eagerly and records every op it
dispatches (with the very tensors it read and wrote); ``replay()`` re-runs those ops in order on
the same tensors and writes each result into the tensor the capture produced, so tensors the
code kept from the capture (a static loss, the gradients) hold the replay's values and in-place
updates (an optimizer step) apply again. Capturing executes nothing on CUDA, so tensors that
existed before the capture and were written during it get their old contents back at its end.

As on CUDA, Python code inside the capture runs once: only what it dispatched is replayed.
tpx's device module replays graphs the same way (backend/graphs.py, its twin: importing the backend
would register tpx in a reference run).
"""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING, Any

import torch

from .sites import Recorder

if TYPE_CHECKING:  # typing only: the sandboxed child imports no more than it needs
    from collections.abc import Iterator
    from types import TracebackType

    from torch.utils._python_dispatch import TorchDispatchMode

_capturing = threading.local()  # the graph being captured in this thread (is_current_stream_capturing)


def _tensors(value: object) -> Iterator[torch.Tensor]:
    if isinstance(value, torch.Tensor):
        yield value
    elif isinstance(value, (list, tuple)):
        for item in value:
            yield from _tensors(item)


def _written(func: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Iterator[torch.Tensor]:
    """The tensors an op writes in place (its schema's ``Tensor(a!)`` arguments)."""
    for i, arg in enumerate(func._schema.arguments):
        if arg.alias_info is not None and arg.alias_info.is_write:
            yield from _tensors(args[i] if i < len(args) else kwargs.get(arg.name))


def _is_view(func: Any) -> bool:
    """Ops whose results alias an input without writing it: nothing to re-run at replay."""
    return any(r.alias_info is not None and not r.alias_info.is_write for r in func._schema.returns)


def _recording_mode(graph: _Graph) -> TorchDispatchMode:
    from torch.utils._python_dispatch import TorchDispatchMode

    class _Recording(TorchDispatchMode):  # type: ignore[no-untyped-call]  # untyped in torch
        def __torch_dispatch__(self, func: Any, types: Any, args: tuple[Any, ...] = (),
                               kwargs: dict[str, Any] | None = None) -> Any:
            kwargs = kwargs or {}
            for t in _written(func, args, kwargs):
                graph._save_before_write(t)
            out = func(*args, **kwargs)
            if _is_view(func):
                return out  # aliases what it viewed: replaying the base's writes updates it too
            inputs = {t.untyped_storage().data_ptr() for t in _tensors([*args, *kwargs.values()])}
            for t in _tensors(out):
                if (ptr := t.untyped_storage().data_ptr()) not in inputs:
                    graph._created.add(ptr)
            graph._ops.append((func, args, kwargs, out))
            return out

    return _Recording()  # type: ignore[no-untyped-call]  # untyped in torch


class _Graph:
    """``torch.cuda.CUDAGraph`` stand-in (see the module docstring)."""

    recorder: Recorder  # set on the class built for the redirect (graph_api)

    def __init__(self, *args: object, **kwargs: object) -> None:
        self.recorder.record("torch.cuda.CUDAGraph", skip=3)
        self._ops: list[tuple[Any, tuple[Any, ...], dict[str, Any], Any]] = []
        self._created: set[int] = set()  # storages the capture allocated
        self._saved: dict[int, tuple[torch.UntypedStorage, torch.UntypedStorage]] = {}
        self._mode: TorchDispatchMode | None = None

    def _save_before_write(self, t: torch.Tensor) -> None:
        storage = t.untyped_storage()
        key = storage.data_ptr()
        if storage.nbytes() and key not in self._created and key not in self._saved:
            self._saved[key] = (storage, storage.clone())  # type: ignore[no-untyped-call]

    def capture_begin(self, pool: object = None, capture_error_mode: str = "global") -> None:
        if self._mode is not None or getattr(_capturing, "graph", None) is not None:
            raise RuntimeError("ferry redirect: a CUDA graph capture is already under way in this thread")
        self.reset()
        self._mode = _recording_mode(self)
        self._mode.__enter__()  # type: ignore[no-untyped-call]  # untyped in torch
        _capturing.graph = self

    def capture_end(self) -> None:
        if self._mode is None:
            raise RuntimeError("ferry redirect: capture_end() without capture_begin()")
        mode, self._mode = self._mode, None
        mode.__exit__(None, None, None)  # type: ignore[no-untyped-call]  # untyped in torch
        _capturing.graph = None
        with torch.no_grad():
            for storage, before in self._saved.values():
                storage.copy_(before)  # capturing ran nothing: what existed keeps its contents
        self._saved.clear()

    def replay(self) -> None:
        self.recorder.record("CUDAGraph.replay", skip=3)
        with torch.no_grad():
            for func, args, kwargs, out in self._ops:
                result = func(*args, **kwargs)
                for new, kept in zip(_tensors(result), _tensors(out), strict=True):
                    if new is not kept:
                        kept.copy_(new)

    def reset(self) -> None:
        self._ops, self._created, self._saved = [], set(), {}

    def pool(self) -> tuple[int, int]:
        return (0, id(self))

    def enable_debug_mode(self) -> None:
        return None

    def debug_dump(self, debug_path: str) -> None:
        return None


class _GraphContext:
    """``torch.cuda.graph(g, pool=None, stream=None, capture_error_mode="global")``."""

    def __init__(self, cuda_graph: _Graph, pool: object = None, stream: object = None,
                 capture_error_mode: str = "global") -> None:
        cuda_graph.recorder.record("torch.cuda.graph", skip=3)
        self.cuda_graph = cuda_graph

    def __enter__(self) -> None:
        self.cuda_graph.capture_begin()

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.cuda_graph.capture_end()


def graph_api(rec: Recorder) -> dict[str, object]:
    """name -> replacement for ``torch.cuda.<name>`` (CUDA graphs)."""
    graph_cls = type("CUDAGraph", (_Graph,), {"recorder": rec, "__module__": "torch.cuda"})
    return {
        "CUDAGraph": graph_cls,
        "graph": _GraphContext,
        "graph_pool_handle": lambda: (0, 0),
        "is_current_stream_capturing": lambda: getattr(_capturing, "graph", None) is not None,
    }
