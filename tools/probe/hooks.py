"""Global hooks that record module calls without edits to user code.

Module path: the qualified name from the outermost module being called, prefixed by that
module's class name (``Net.encoder.0.fc``); a module not registered under the outermost one
is named ``<parent path>.<ClassName>``. Call index: how many times that path ran before.

Step (documented in docs/parity.md): if the program steps an optimizer, step k is the work
after the k-th ``optimizer.step()``; until the first optimizer step, and in programs that never
step one, each call of an outermost module starts a new step. Module calls are recorded for
steps ``0 .. FERRY_PROBE_STEPS-1``; after that the hooks remove themselves (zero overhead).

Bounds: within a step, only the first ``FERRY_PROBE_CALLS_PER_STEP`` outermost calls of each mode
(training or eval, grad enabled or not) are recorded, so a sampling loop inside a step costs a
few recorded forwards, not hundreds; the others run with hooks that only count. When the
recorder stops (byte budget or event cap reached) the hooks remove themselves too.
"""

from __future__ import annotations

import logging
import weakref
from collections.abc import Callable, Collection, Sequence
from typing import Any

import torch
import torch.utils._pytree as pytree
from torch.nn.modules import module as nn_module
from torch.optim import optimizer as optim_mod
from torch.overrides import TorchFunctionMode

from .recorder import Recorder

logger = logging.getLogger(__name__)

MAX_ROOTS = 64  # outermost modules remembered for naming parameters (a program may build one per call)


def tensor_leaves(tree: Any, prefix: str) -> list[tuple[str, torch.Tensor]]:
    """(name, tensor) for every tensor leaf of an output/args structure."""
    if isinstance(tree, torch.Tensor):
        return [(prefix, tree)]
    try:
        flat, _ = pytree.tree_flatten_with_path(tree)
    except Exception:  # exotic containers: record nothing rather than fail
        return []
    return [(prefix + pytree.keystr(path), leaf) for path, leaf in flat if isinstance(leaf, torch.Tensor)]


class _OpCensus(TorchFunctionMode):
    """Notes which torch functions run directly inside each module (first step only)."""

    def __init__(self, probe: ModuleProbe) -> None:
        super().__init__()
        self.probe = probe

    def __torch_function__(self, func: Callable[..., Any], types: Collection[type], args: Sequence[Any] = (),
                           kwargs: dict[str, Any] | None = None) -> Any:
        stack = self.probe.stack
        if stack and not self.probe.in_hook:
            name = getattr(func, "__name__", None) or str(func)
            if name in ("__get__", "__set__"):
                name = getattr(getattr(func, "__self__", None), "__name__", name)
            ops = self.probe.recorder.module_ops.setdefault(stack[-1], [])
            if name not in ops:
                ops.append(name)
        return func(*args, **(kwargs or {}))


class ModuleProbe:
    """Installs global forward (pre-)hooks and an optimizer step hook feeding a Recorder."""

    def __init__(self, recorder: Recorder) -> None:
        self.recorder = recorder
        self.config = recorder.config
        self.stack: list[str] = []
        self._root: weakref.ref[torch.nn.Module] | None = None
        self._root_name = ""
        self._names: dict[int, str] = {}
        # every outermost module recorded, first seen first: the gradient probe names parameters by them
        self.roots: list[tuple[str, weakref.ref[torch.nn.Module]]] = []
        self._root_name_counts: dict[int, str] = {}
        self.root_calls = 0
        self.optimizer_steps = 0
        self.call_counts: dict[str, int] = {}
        self._mode_calls: dict[tuple[int, bool, bool], int] = {}  # (step, training, grad) -> outermost calls
        self._skip_depth = 0  # > 0 inside an outermost call that is not recorded
        self.unrecorded_root_calls = 0
        self._handles: list[Any] = []
        self._optimizer_handle: Any = None
        self._census: _OpCensus | None = None
        self._census_done = not self.config.op_census
        self.finished = False
        self.in_hook = False
        # called once the recorded steps are done, outside any optimizer step (ProbeSession: FERRY_PROBE_END)
        self.on_steps_done: Callable[[], None] | None = None

    # ------------------------------------------------------------ lifecycle
    def install(self) -> None:
        if self.config.steps <= 0:
            self.finished = True
            return
        self._handles = [
            nn_module.register_module_forward_pre_hook(self._pre_hook),
            nn_module.register_module_forward_hook(self._post_hook, always_call=True),
        ]
        # torch iterates the global optimizer hooks lazily: this one is removed only at uninstall()
        self._optimizer_handle = optim_mod.register_optimizer_step_post_hook(self._optimizer_hook)

    def _remove_module_hooks(self) -> None:
        for handle in self._handles:
            handle.remove()
        self._handles = []
        self._stop_census()
        self.finished = True

    def uninstall(self) -> None:
        self._remove_module_hooks()
        if self._optimizer_handle is not None:
            self._optimizer_handle.remove()
            self._optimizer_handle = None

    @property
    def step(self) -> int:
        if self.optimizer_steps:
            return self.optimizer_steps
        return max(self.root_calls - 1, 0)

    def _recording(self) -> bool:
        return not self.finished and self.step < self.config.steps

    def steps_done(self) -> bool:
        """Whether every step the probe records has been recorded (not stopped by a budget)."""
        return self.config.steps > 0 and self.step >= self.config.steps and self.recorder.stopped is None

    def _maybe_finish(self, in_optimizer_step: bool = False) -> None:
        if self.stack:
            return
        if self.step >= self.config.steps:
            logger.debug("probe: recorded %d step(s); removing module hooks", self.config.steps)
        elif self.recorder.stopped is not None:
            logger.info("probe: %s; removing module hooks, the run goes on unprobed", self.recorder.stopped)
        else:
            return
        self._remove_module_hooks()
        self.recorder.flush()
        # in an optimizer step the gradient probe's post hook has not run yet: the session's own hook,
        # registered after it, calls on_steps_done there
        if not in_optimizer_step and self.on_steps_done is not None and self.steps_done():
            self.on_steps_done()

    def _skip_root_call(self, module: torch.nn.Module) -> bool:
        """Whether this outermost call is past its step's and mode's quota (``calls_per_step``)."""
        mode = (self.step, module.training, torch.is_grad_enabled())
        n = self._mode_calls.get(mode, 0)
        self._mode_calls[mode] = n + 1
        return n >= self.config.calls_per_step

    # ----------------------------------------------------------------- names
    def _path_of(self, module: torch.nn.Module) -> str:
        if not self.stack:
            root = self._root() if self._root is not None else None
            if root is not module:
                self._root = weakref.ref(module)
                self._root_name = type(module).__name__
                self._names = {id(m): name for name, m in module.named_modules(remove_duplicate=False)}
                if len(self.roots) < MAX_ROOTS and not any(ref() is module for _, ref in self.roots):
                    self.roots.append((self._root_name, weakref.ref(module)))
            return self._root_name
        name = self._names.get(id(module))
        if name is None:
            return f"{self.stack[-1]}.{type(module).__name__}"
        return f"{self._root_name}.{name}" if name else self._root_name

    # ----------------------------------------------------------------- hooks
    def _pre_hook(self, module: torch.nn.Module, args: tuple[Any, ...]) -> None:
        if self.finished or torch.compiler.is_compiling():
            return
        if self._skip_depth:
            self._skip_depth += 1
            return
        if not self.stack:
            self.root_calls += 1
            if self.step >= self.config.steps or self.recorder.stopped is not None:
                self._maybe_finish()
                return
            if self._skip_root_call(module):
                self.unrecorded_root_calls += 1
                self._skip_depth = 1
                return
            self.recorder.flush()
        path = self._path_of(module)
        self.stack.append(path)
        if len(self.stack) == 1 and not self._census_done:
            self._start_census()
        call = self.call_counts.get(path, 0)
        self.call_counts[path] = call + 1
        self.recorder.module_classes.setdefault(path, type(module).__name__)
        if self.config.record_inputs:
            self._record_leaves(args, "in", "module_input", path, call)

    def _post_hook(self, module: torch.nn.Module, args: tuple[Any, ...], output: Any) -> None:
        if self.finished or torch.compiler.is_compiling():
            return
        if self._skip_depth:
            self._skip_depth -= 1
            return
        if not self.stack:
            return
        path = self.stack.pop()
        call = self.call_counts.get(path, 1) - 1
        self._record_leaves(output, "out", "module_output", path, call)
        self.recorder.add_marker(
            {"kind": "module_end", "module": path, "call": call, "step": self.step,
             "key": f"{path}#{call}", "class": type(module).__name__}
        )
        if not self.stack:
            self._stop_census()
            self._census_done = True
            if self.recorder.stopped is not None:
                self._maybe_finish()

    def _record_leaves(self, value: Any, side: str, kind: str, path: str, call: int) -> None:
        """Record every tensor leaf of a module call's inputs (``side`` "in") or output ("out"); the
        census does not count the probe's own ops meanwhile (``in_hook``)."""
        self.in_hook = True
        try:
            for leaf, t in tensor_leaves(value, side):
                self.recorder.add_tensor(
                    f"{path}#{call}:{leaf}",
                    t,
                    {"kind": kind, "module": path, "call": call, "step": self.step, "leaf": leaf},
                )
        finally:
            self.in_hook = False

    def _optimizer_hook(self, optimizer: Any, args: Any, kwargs: Any) -> None:
        self.recorder.optimizer_step += 1  # every step of the run (printed values are placed by it)
        if self.finished:
            return
        self.optimizer_steps += 1
        self.recorder.flush()
        self._maybe_finish(in_optimizer_step=True)

    # ---------------------------------------------------------------- census
    def _start_census(self) -> None:
        try:
            self._census = _OpCensus(self)
            self._census.__enter__()  # type: ignore[no-untyped-call]  # untyped in torch
        except Exception:
            logger.debug("probe: op census unavailable", exc_info=True)
            self._census = None

    def _stop_census(self) -> None:
        if self._census is not None:
            try:
                self._census.__exit__(None, None, None)  # type: ignore[no-untyped-call]  # untyped in torch
            except Exception:
                logger.debug("probe: op census exit failed", exc_info=True)
            self._census = None
