"""Device-to-host syncs and host-to-device copies, each with the user's source line.

Wraps a few Tensor methods (``item``, ``tolist``, ``cpu``, ``numpy``, ``__bool__``/``__float__``/
``__int__``, printing, data-dependent ops such as ``nonzero``, and ``to``). A wrapper only counts
when a device (non-CPU) tensor is involved. torch.compile never sees the wrappers: traced code
resolves tensor methods by name, and the wrappers' own frames are marked as skipped for dynamo,
so they add no graph breaks. ``torch.*`` functions are deliberately not wrapped (dynamo keys
its allow-lists on their identity); data-dependent ``torch.nonzero(x)`` calls are still counted
by the tpx op statistics, without a source line.
"""

from __future__ import annotations

import functools
import threading
from collections.abc import Callable
from typing import Any, TypedDict

import torch

from .after_dynamo import after_dynamo_import
from .frames import FrameFinder, OwnFrame

# attribute on torch.Tensor -> sync kind
TENSOR_SYNC_METHODS = {
    "item": "item", "tolist": "tolist", "cpu": "cpu", "numpy": "numpy", "__bool__": "bool",
    "__float__": "float", "__int__": "int", "__index__": "int", "__repr__": "print", "__format__": "print",
    "nonzero": "nonzero", "unique": "unique", "masked_select": "masked_select",
    "argwhere": "argwhere", "bincount": "bincount", "repeat_interleave": "repeat_interleave",
}
# data-dependent ops (output size depends on values): the op name is the sync kind
DATA_DEPENDENT = {"nonzero", "unique", "masked_select", "argwhere", "bincount", "repeat_interleave"}

_local = threading.local()
Method = Callable[..., Any]  # a torch.Tensor method, original or wrapped


class SyncSiteRow(TypedDict):
    """One (category, kind, source line) as profile.json holds it (read back as models.SyncSite)."""

    category: str  # d2h_sync | h2d_copy
    kind: str
    file: str
    line: int
    function: str
    source: str
    count: int
    window_count: int  # of count, inside the profiled window
    bytes: int


def _is_device(t: Any) -> bool:
    return isinstance(t, torch.Tensor) and t.device.type not in ("cpu", "meta")


def _device_arg(args: tuple[Any, ...], kwargs: dict[str, Any]) -> torch.device | None:
    dev = kwargs.get("device")
    if dev is None:
        for a in args:
            if isinstance(a, (str, torch.device)):
                dev = a
                break
            if isinstance(a, torch.Tensor):
                dev = a.device
                break
    if dev is None:
        return None
    try:
        return torch.device(dev)
    except (RuntimeError, TypeError):
        return None


def _skip_in_dynamo(functions: list[Method]) -> None:
    """Tell dynamo never to compile the wrappers' frames (they run eagerly, as the originals would), once
    the program loads dynamo (``after_dynamo``: a program that never compiles does not pay its import)."""
    codes = {c for f in functions if (c := getattr(f, "__code__", None)) is not None}

    def mark() -> None:
        try:
            from torch._dynamo.eval_frame import skip_code
        except Exception:  # no dynamo, nothing to protect
            return
        for code in codes:
            skip_code(code)

    after_dynamo_import(mark)


class SyncTracker:
    """Counts syncs/copies per (kind, source line); ``window`` counts only inside the profiled window."""

    def __init__(self, finder: FrameFinder) -> None:
        self.finder = finder
        self.sites: dict[tuple[str, str, str, int], SyncSiteRow] = {}
        self.in_window = False
        self._saved: list[tuple[Any, str, Any]] = []

    # --------------------------------------------------------------- events
    def note(self, category: str, kind: str, nbytes: int = 0) -> None:
        try:
            where = self.finder.user_frame(skip=3)
        except OwnFrame:  # the probe copying what it records, in the same run
            return
        file, line, func, src = where if where else ("<outside repo>", 0, "", "")
        key = (category, kind, file, line)
        site = self.sites.get(key)
        if site is None:
            site = self.sites[key] = {"category": category, "kind": kind, "file": file, "line": line,
                                      "function": func, "source": src, "count": 0, "window_count": 0, "bytes": 0}
        site["count"] += 1
        site["bytes"] += nbytes
        if self.in_window:
            site["window_count"] += 1

    # ------------------------------------------------------------- patching
    def _wrap(self, owner: Any, name: str, make: Callable[[Method], Method]) -> None:
        orig = getattr(owner, name, None)
        if orig is None:
            return
        wrapped = make(orig)
        try:
            functools.update_wrapper(wrapped, orig)
        except (AttributeError, TypeError):
            pass
        own = name in getattr(owner, "__dict__", {})
        setattr(owner, name, wrapped)
        self._saved.append((owner, name, orig if own else None))

    def _sync_method(self, kind: str) -> Callable[[Method], Method]:
        tracker = self

        def make(orig: Method) -> Method:
            def method(self: torch.Tensor, *args: Any, **kwargs: Any) -> Any:
                if torch.compiler.is_compiling() or getattr(_local, "busy", False) or not _is_device(self):
                    return orig(self, *args, **kwargs)
                _local.busy = True
                try:
                    copied = self.numel() * self.element_size() if kind in ("cpu", "numpy", "tolist") else 0
                    tracker.note("d2h_sync", kind, copied)
                    return orig(self, *args, **kwargs)
                finally:
                    _local.busy = False
            return method
        return make

    def _to(self, orig: Method) -> Method:
        tracker = self

        def to(self: torch.Tensor, *args: Any, **kwargs: Any) -> Any:
            if torch.compiler.is_compiling() or getattr(_local, "busy", False):
                return orig(self, *args, **kwargs)
            dev = _device_arg(args, kwargs)
            if dev is not None and dev.type != self.device.type:
                _local.busy = True
                try:
                    nbytes = self.numel() * self.element_size()
                    if self.device.type == "cpu":
                        tracker.note("h2d_copy", "to", nbytes)
                    elif dev.type == "cpu":
                        tracker.note("d2h_sync", "cpu", nbytes)
                    return orig(self, *args, **kwargs)
                finally:
                    _local.busy = False
            return orig(self, *args, **kwargs)
        return to

    def install(self) -> None:
        for name, kind in TENSOR_SYNC_METHODS.items():
            self._wrap(torch.Tensor, name, self._sync_method(kind))
        self._wrap(torch.Tensor, "to", self._to)
        _skip_in_dynamo([getattr(torch.Tensor, name) for _, name, _ in self._saved])

    def uninstall(self) -> None:
        for owner, name, orig in reversed(self._saved):
            if orig is None:
                delattr(owner, name)
            else:
                setattr(owner, name, orig)
        self._saved = []

    def rows(self) -> list[SyncSiteRow]:
        return sorted(self.sites.values(), key=lambda s: (-s["count"], s["file"], s["line"]))
