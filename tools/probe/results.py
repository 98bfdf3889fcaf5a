"""What a program computes outside any nn.Module: the tensors it saves and its final top-level tensors.

- **Saved** (kind ``saved``): while the probe is installed, ``torch.save`` and, where numpy is
  already imported (torch imports it when installed; the probe never does), ``numpy.save``,
  ``numpy.savez`` and ``numpy.savez_compressed`` are wrapped. After the real save returned, every
  tensor (and array) in what was saved is recorded under
  ``saved:<file>:obj<pytree path>#<call>`` (``saved:out/u.pt:obj#0``,
  ``saved:ckpt.pt:obj['model']['fc.weight']#1``, ``saved:fields.npz:obj['u']#0``). ``<file>`` is
  the path relative to the run's workspace (``FERRY_WORKSPACE``) or working directory, else the
  file name, so the reference and the target name it alike from different sandbox paths; a file
  in the temporary directory outside them (a random name) and saves to a buffer are not
  recorded. ``<call>`` counts the saves of that file; the first ``SAVES_PER_FILE`` are recorded.
- **Final** (kind ``final``): at the probe's close (atexit), the tensors and arrays bound to
  public top-level names of ``__main__`` (the script's globals; ``python -m pkg.mod``'s module),
  at most ``MAX_FINAL_NAMES``, under ``final:<name>``.

Both are recorded within the byte budget without stopping the recording (a large checkpoint
goes without data, listed as skipped). The wrappers pass everything through unchanged, keep the
wrapped function's attributes (functools.wraps), never break the save and do nothing while
torch.compile traces. Standard library and torch only: this runs inside the user's process.
"""

from __future__ import annotations

import functools
import logging
import os
import sys
import tempfile
import threading
import types
from collections.abc import Callable
from typing import Any

import torch

from .hooks import tensor_leaves
from .recorder import Recorder

logger = logging.getLogger(__name__)

SAVED_KIND = "saved"
FINAL_KIND = "final"
RESULT_KINDS = (SAVED_KIND, FINAL_KIND)
SAVES_PER_FILE = 4
MAX_FINAL_NAMES = 64
_NUMPY_SAVES = ("save", "savez", "savez_compressed")
_busy = threading.local()  # inside a wrapped save: a save calling another records once


def _numpy_array_type() -> type | None:
    numpy = sys.modules.get("numpy")
    array = getattr(numpy, "ndarray", None)
    return array if isinstance(array, type) else None


def _as_tensor(value: Any, array_type: type | None) -> torch.Tensor | None:
    if isinstance(value, torch.Tensor):
        return value
    if array_type is not None and isinstance(value, array_type):
        try:
            return torch.from_numpy(value)  # no copy; the recorder copies what it keeps
        except Exception:  # object/string arrays: nothing numeric to compare
            return None
    return None


def _leaves(obj: Any) -> list[tuple[str, torch.Tensor]]:
    """(pytree path, tensor) for every tensor and numpy array in ``obj``."""
    array_type = _numpy_array_type()
    direct = _as_tensor(obj, array_type)
    if direct is not None:
        return [("obj", direct)]
    found = tensor_leaves(obj, "obj")
    if array_type is None:
        return found
    try:
        import torch.utils._pytree as pytree

        flat, _ = pytree.tree_flatten_with_path(obj)
    except Exception:
        return found
    arrays = [("obj" + pytree.keystr(path), t) for path, leaf in flat
              if not isinstance(leaf, torch.Tensor) and (t := _as_tensor(leaf, array_type)) is not None]
    return found + arrays


def file_key(target: Any, out_dir: str | None = None) -> str | None:
    """The name a save to ``target`` is recorded under, alike in both runs; None: not recorded."""
    name = getattr(target, "name", target) if not isinstance(target, (str, os.PathLike)) else target
    if not isinstance(name, (str, os.PathLike)):
        return None  # a buffer (io.BytesIO) or a descriptor
    try:
        path = os.path.abspath(os.fspath(name))
    except (TypeError, ValueError):
        return None
    if out_dir is not None and (path + os.sep).startswith(os.path.abspath(out_dir) + os.sep):
        return None  # the probe's own files
    for base in (os.environ.get("FERRY_WORKSPACE"), os.getcwd()):
        if base:
            base = os.path.abspath(base)
            if path.startswith(base + os.sep):
                return os.path.relpath(path, base).replace(os.sep, "/")
    if path.startswith(os.path.abspath(tempfile.gettempdir()) + os.sep):
        return None  # a temporary file: its name is random
    return os.path.basename(path)


def record_saved(recorder: Recorder, target: Any, obj: Any) -> None:
    """Record the tensors and arrays in ``obj``, just saved to ``target``."""
    if recorder.module_classes:
        return  # modules ran: they are the program's evidence (its checkpoints are not compared, not copied)
    key = file_key(target, str(recorder.out_dir))
    if key is None:
        return
    call = recorder.next_explicit_call(f"{SAVED_KIND}:{key}")
    if call >= SAVES_PER_FILE:
        return
    for leaf, tensor in _leaves(obj):
        recorder.add_tensor(f"{SAVED_KIND}:{key}:{leaf}#{call}", tensor,
                            {"kind": SAVED_KIND, "module": f"{SAVED_KIND}:{key}", "call": call, "leaf": leaf},
                            stop_on_budget=False)


def _recording(recorder: Recorder) -> bool:
    return recorder.stopped is None and not getattr(_busy, "on", False) and not torch.compiler.is_compiling()


def _wrap(original: Callable[..., Any], recorder: Recorder,
          saved: Callable[[tuple[Any, ...], dict[str, Any]], tuple[Any, Any] | None]) -> Callable[..., Any]:
    """``original`` that records what ``saved(args, kwargs)`` names ((target, obj)) after it returned."""

    @functools.wraps(original)
    def _ferry_probe_save(*args: Any, **kwargs: Any) -> Any:
        if not _recording(recorder):
            return original(*args, **kwargs)
        _busy.on = True
        try:
            result = original(*args, **kwargs)
        finally:
            _busy.on = False
        try:
            what = saved(args, kwargs)
            if what is not None:
                _busy.on = True
                try:
                    record_saved(recorder, *what)
                finally:
                    _busy.on = False
        except Exception:  # never break the user's save
            logger.debug("probe: recording a save failed", exc_info=True)
        return result

    _ferry_probe_save._ferry_probe_original = original  # type: ignore[attr-defined]
    return _ferry_probe_save


def _torch_saved(args: tuple[Any, ...], kwargs: dict[str, Any]) -> tuple[Any, Any] | None:
    obj = args[0] if args else kwargs.get("obj")
    target = args[1] if len(args) > 1 else kwargs.get("f")
    return None if target is None else (target, obj)


def _numpy_saved(args: tuple[Any, ...], kwargs: dict[str, Any]) -> tuple[Any, Any] | None:
    target = args[0] if args else kwargs.get("file")
    arr = args[1] if len(args) > 1 else kwargs.get("arr")
    if target is None or arr is None:
        return None
    if isinstance(target, (str, os.PathLike)) and not os.fspath(target).endswith(".npy"):
        target = os.fspath(target) + ".npy"  # numpy.save's own naming
    return target, arr


def _numpy_savez_saved(args: tuple[Any, ...], kwargs: dict[str, Any]) -> tuple[Any, Any] | None:
    target = args[0] if args else kwargs.get("file")
    if target is None:
        return None
    arrays: dict[str, Any] = {f"arr_{i}": a for i, a in enumerate(args[1:])}
    arrays.update({k: v for k, v in kwargs.items() if k not in ("file", "allow_pickle")})
    if isinstance(target, (str, os.PathLike)) and not os.fspath(target).endswith(".npz"):
        target = os.fspath(target) + ".npz"
    return target, arrays


class SaveProbe:
    """Wraps the save functions while installed; ``uninstall`` restores those still wrapped."""

    def __init__(self, recorder: Recorder) -> None:
        self.recorder = recorder
        self._wrapped: list[tuple[Any, str, Callable[..., Any], Callable[..., Any]]] = []

    def install(self) -> None:
        original = torch.save
        wrapper = _wrap(original, self.recorder, _torch_saved)
        for owner in (torch, torch.serialization):
            self._replace(owner, "save", original, wrapper)
        numpy = sys.modules.get("numpy")  # only when already imported: the probe never imports numpy
        if isinstance(numpy, types.ModuleType):
            for name in _NUMPY_SAVES:
                fn = getattr(numpy, name, None)
                if callable(fn):
                    self._replace(numpy, name, fn, _wrap(fn, self.recorder,
                                                         _numpy_saved if name == "save" else _numpy_savez_saved))

    def _replace(self, owner: Any, name: str, original: Callable[..., Any], wrapper: Callable[..., Any]) -> None:
        if getattr(owner, name, None) is not original:
            return
        try:
            setattr(owner, name, wrapper)
        except Exception:
            logger.debug("probe: cannot wrap %s.%s", getattr(owner, "__name__", owner), name, exc_info=True)
            return
        self._wrapped.append((owner, name, original, wrapper))

    def uninstall(self) -> None:
        for owner, name, original, wrapper in reversed(self._wrapped):
            if getattr(owner, name, None) is wrapper:
                setattr(owner, name, original)
        self._wrapped = []


def record_final(recorder: Recorder, main: Any = None) -> int:
    """Record the tensors bound to public top-level names of ``main`` (default ``__main__``); how many."""
    if recorder.module_classes:
        return 0  # modules ran: they are the evidence, the end state of a training is not compared
    module = sys.modules.get("__main__") if main is None else main
    names = getattr(module, "__dict__", None)
    if not isinstance(names, dict):
        return 0
    array_type = _numpy_array_type()
    recorded = 0
    for name, value in list(names.items()):
        if recorded >= MAX_FINAL_NAMES:
            break
        if not isinstance(name, str) or name.startswith("_"):
            continue
        tensor = _as_tensor(value, array_type)  # modules, classes, functions... are none
        if tensor is None:
            continue
        recorder.add_tensor(f"{FINAL_KIND}:{name}", tensor,
                            {"kind": FINAL_KIND, "module": f"{FINAL_KIND}:{name}", "leaf": name},
                            stop_on_budget=False)
        recorded += 1
    return recorded
