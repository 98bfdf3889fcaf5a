"""Run profiler set-up that needs ``torch._dynamo`` only once the program itself imports it.

Importing dynamo costs a second or two; PyTorch imports it lazily (``torch.compile`` does, before it
compiles anything), and a program that never compiles never pays for it. The profiler's dynamo work
(its graph-break and recompile collectors, the ``skip_code`` marks on its wrappers) waits for that
import through :func:`after_dynamo_import`: at once when dynamo is loaded already, else right after
the program's own import of ``torch._dynamo`` finishes (one meta path finder, which leaves
``sys.meta_path`` at that import).
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Callable, Sequence
from importlib.machinery import ModuleSpec
from types import ModuleType

logger = logging.getLogger(__name__)

_PENDING: list[Callable[[], None]] = []


def _run(hook: Callable[[], None]) -> None:
    try:
        hook()
    except Exception:  # never the program's problem
        logger.debug("profile: a dynamo hook failed", exc_info=True)


def after_dynamo_import(hook: Callable[[], None]) -> None:
    """``hook()`` now when ``torch._dynamo`` is imported, else right after the program imports it."""
    if "torch._dynamo" in sys.modules:
        _run(hook)
        return
    _PENDING.append(hook)
    if not any(isinstance(f, _FerryAfterDynamoImport) for f in sys.meta_path):
        sys.meta_path.insert(0, _FerryAfterDynamoImport())


class _FerryAfterDynamoImport:
    """Finds nothing itself: on the import of ``torch._dynamo`` it leaves ``sys.meta_path``, asks the
    finders after it for the spec and wraps that loader's ``exec_module`` to run the pending hooks."""

    def find_spec(self, name: str, path: Sequence[str] | None = None,
                  target: ModuleType | None = None) -> ModuleSpec | None:
        if name != "torch._dynamo":
            return None
        try:
            sys.meta_path.remove(self)
        except ValueError:
            pass
        spec: ModuleSpec | None = None
        for finder in sys.meta_path:
            find = getattr(finder, "find_spec", None)
            spec = find(name, path, target) if find is not None else None
            if spec is not None:
                break
        if spec is None or spec.loader is None or not hasattr(spec.loader, "exec_module"):
            return spec
        original = spec.loader.exec_module

        def exec_module(module: ModuleType) -> None:
            original(module)
            hooks = list(_PENDING)
            _PENDING.clear()
            for hook in hooks:
                _run(hook)

        spec.loader.exec_module = exec_module  # type: ignore[method-assign]  # this loader instance only
        return spec
