"""``torch.cuda.CUDAGraph`` / ``torch.cuda.graph`` replayed eagerly, on a device without CUDA graphs.

Code written for CUDA graphs captures a step once on static tensors and replays it
(``static_x.copy_(batch); graph.replay(); static_loss.item()``); the stand-in keeps exactly that contract
at the level of PyTorch's ops. While capturing it runs the code eagerly and records every op it
dispatches, with the very tensors it read and wrote; ``replay()`` runs those ops again in order on the
same tensors and writes each result into the tensor the capture produced. So a replay reads the static
inputs as they are now, and the tensors the code kept from the capture (a static loss, the gradients, the
parameters an optimizer step updates in place) hold the replay's values. As on CUDA, capturing computes
nothing the program can see: tensors that existed before the capture and were written during it get
their contents back at its end; Python code inside the capture runs once, and only what it dispatched is
replayed.

tpx's device module (``backend/graphs.py``) and the CPU reference run's redirect
(``tools/redirect/graphs.py``) both build on :class:`EagerGraph`.
"""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING, Any

import torch

if TYPE_CHECKING:  # typing only: a user's process imports no more than it needs
    from collections.abc import Iterator
    from types import TracebackType

    from torch.utils._python_dispatch import TorchDispatchMode

_capturing = threading.local()  # the graph being captured in this thread


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
    """Ops whose results alias an input without writing it: nothing to run again at replay."""
    return any(r.alias_info is not None and not r.alias_info.is_write for r in func._schema.returns)


def _recording_mode(graph: EagerGraph) -> TorchDispatchMode:
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


class EagerGraph:
    """A captured sequence of ops, replayed eagerly on the tensors it captured (``torch.cuda.CUDAGraph``'s
    methods; the module docstring says how). ``owner`` prefixes its error messages."""

    owner = "ferry"

    def __init__(self, *args: object, **kwargs: object) -> None:
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
            raise RuntimeError(f"{self.owner}: a graph capture is already under way in this thread")
        self.reset()
        self._mode = _recording_mode(self)
        self._mode.__enter__()  # type: ignore[no-untyped-call]  # untyped in torch
        _capturing.graph = self

    def capture_end(self) -> None:
        if self._mode is None:
            raise RuntimeError(f"{self.owner}: capture_end() without capture_begin()")
        mode, self._mode = self._mode, None
        mode.__exit__(None, None, None)  # type: ignore[no-untyped-call]  # untyped in torch
        _capturing.graph = None
        with torch.no_grad():
            for storage, before in self._saved.values():
                storage.copy_(before)  # capturing computed nothing: what existed keeps its contents
        self._saved.clear()

    def instantiate(self) -> None:
        return None

    def replay(self) -> None:
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


class GraphContext:
    """``with graph(g):`` captures into ``g`` (``torch.cuda.graph``'s arguments; no streams needed)."""

    def __init__(self, cuda_graph: EagerGraph, pool: object = None, stream: object = None,
                 capture_error_mode: str = "global") -> None:
        self.cuda_graph = cuda_graph

    def __enter__(self) -> None:
        self.cuda_graph.capture_begin()

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.cuda_graph.capture_end()


def make_graphed_callables(callables: Any, sample_args: Any, num_warmup_iters: int = 3,
                           allow_unused_input: bool = False, pool: object = None) -> Any:
    """The callables themselves: replayed eagerly they would compute the same (no capture needed)."""
    return callables


def graph_pool_handle() -> tuple[int, int]:
    return (0, 0)


def is_current_stream_capturing() -> bool:
    return getattr(_capturing, "graph", None) is not None
