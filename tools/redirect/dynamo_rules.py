"""How ``torch.compile`` treats the redirect's replacements: as PyTorch's own, never as code to trace.

Dynamo must never trace into Ferry's code: inlining one of the redirect's Python replacements would
make it re-import that module by name (the child holds Ferry's modules under names a user cannot
import) and would trace the call-site log's frame walks. So, once Dynamo is loaded:

* every file of the redirect is a Dynamo *skip* file: a replacement Dynamo meets and has no rule for
  runs eagerly at a graph break, exactly as when it is called outside ``torch.compile``;
* the questions a program asks CUDA (``torch.cuda.is_available()``, ``get_device_properties``,
  ``get_device_capability``, ``current_device``, ...) and the calls that only order work
  (``torch.cuda.synchronize()``, NVTX markers) are *constant-folded* at trace time, as Dynamo folds
  torch's own: the graph holds the answer the program gets outside the compiled region, and
  ``fullgraph=True`` does not break on them;
* the wrapped factories (``torch.zeros(..., device="cuda")`` ...) are in-graph torch functions: the
  traced call maps the device once and the graph holds the plain factory on the target.

``Tensor.cuda``/``Tensor.to`` are traced by name as tensor methods and ``torch.autocast("cuda")`` as
Dynamo's autocast region; both reach the redirect's mapping while AOTAutograd traces the graph.
Standard library and torch only: this runs inside the user's process.
"""

from __future__ import annotations

import functools
import os
import sys
from typing import TYPE_CHECKING, Any

import torch

if TYPE_CHECKING:  # typing only: the sandboxed child imports no more than it needs
    from collections.abc import Iterable

#: the redirect's package directory (its replacements are defined here)
OWN_DIR = os.path.dirname(os.path.abspath(__file__)) + os.sep

#: ``torch.cuda`` replacements answered at trace time (questions, and calls that only order work)
FOLDED = frozenset({
    "is_available", "is_initialized", "device_count", "current_device", "get_device_name",
    "get_device_properties", "get_device_capability", "is_bf16_supported", "synchronize", "init",
})

_registered: list[bool] = []
_pending: dict[str, list[object]] = {"folded": [], "in_graph": []}


def is_own(fn: object) -> bool:
    """Whether ``fn`` is one of the redirect's replacements (defined in its package)."""
    code = getattr(fn, "__code__", None)
    return code is not None and str(code.co_filename).startswith(OWN_DIR)


def remember(cuda_api: dict[str, object], factories: Iterable[object], nvtx: Iterable[object],
             folded: Iterable[object] = ()) -> None:
    """Note the replacements the redirect installed; they get their Dynamo rules when Dynamo loads
    (``folded``: more questions answered at trace time, torch.accelerator's)."""
    _pending["folded"].extend(fn for name, fn in cuda_api.items() if name in FOLDED)
    _pending["folded"].extend(folded)
    _pending["folded"].extend(nvtx)
    _pending["in_graph"].extend(factories)
    if "torch._dynamo" in sys.modules:
        register()
    else:
        _register_before_compile()


def _register_before_compile() -> None:
    """``torch.compile`` registers the rules first (Dynamo is imported lazily by PyTorch itself, so
    a program that never compiles never pays for loading it)."""
    original = torch.compile
    if getattr(original, "_ferry_rules", False):
        return

    @functools.wraps(original)
    def compile(*args: Any, **kwargs: Any) -> Any:
        register()
        return original(*args, **kwargs)

    compile._ferry_rules = True  # type: ignore[attr-defined]
    torch.compile = compile  # torch's own function, wrapped on purpose (the child's monkeypatching)


def register() -> None:
    """Give Dynamo its rules for the redirect (once; after ``torch._dynamo`` is importable)."""
    if _registered:
        return
    _registered.append(True)
    from torch._dynamo import trace_rules
    from torch._dynamo.variables import torch as torch_variables
    from torch._dynamo.variables.functions import SkipFunctionVariable
    from torch._dynamo.variables.torch import TorchInGraphFunctionVariable

    if OWN_DIR not in trace_rules.SKIP_DIRS:
        trace_rules.SKIP_DIRS.append(OWN_DIR)
        trace_rules._recompile_re()
    rules: dict[Any, Any] = trace_rules.get_torch_obj_rule_map()
    handlers: dict[Any, Any] = TorchInGraphFunctionVariable._get_handlers()
    # a dict at run time (torch annotates the list it builds it from)
    folds: dict[Any, None] = torch_variables.constant_fold_functions  # type: ignore[assignment]
    for fn in _pending["folded"]:
        rules[fn] = TorchInGraphFunctionVariable
        folds[fn] = None
        # torch's special handlers were keyed by name on the replacement (torch.cuda.synchronize
        # would emit a CUDA device synchronization into the graph): folding replaces them
        handlers.pop(fn, None)
    for fn in _pending["in_graph"]:
        rules[fn] = TorchInGraphFunctionVariable
    # The rule map was filled by name, so the redirect's other replacements may sit in it under
    # torch's names: they run eagerly at a graph break instead, as the skip directory says.
    for obj in list(rules):
        if is_own(obj) and obj not in _pending["folded"] and obj not in _pending["in_graph"]:
            rules[obj] = SkipFunctionVariable
