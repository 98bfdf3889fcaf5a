"""Gradients and optimizer state of the first optimizer steps (docs/parity.md, "Gradients and
optimizer state").

Global optimizer step hooks, installed beside the module hooks: just before each optimizer's step
``n`` (``n < FERRY_PROBE_GRAD_STEPS``) every parameter's ``.grad`` is recorded (final by then: DDP's
all-reduce is done, a GradScaler has unscaled it); just after it, every tensor of
``optimizer.state[p]`` (``exp_avg``, ``momentum_buffer``, ``step``...) and the parameter's new value.

Names: the parameter's qualified name under an outermost module the module probe recorded, prefixed
by that module's class name (``Net.fc.weight``), as module paths are; a parameter no recorded module
owns is ``<optimizer label>.param_groups.<g>.<i>``, the label being the optimizer's class name,
``<class>_<k>`` for the k-th further optimizer of that class (first steps first). Keys:
``grad:<name>#<n>``, ``optim:<name>.<state>#<n>``, ``param:<name>#<n>``.

A DTensor (FSDP2) is recorded as its local shard, which its event says (``dtensor``). Runs inside
the user's process: standard library and torch only; never raises into the user's step.
"""

from __future__ import annotations

import logging
import weakref
from typing import Any

import torch
from torch.optim import optimizer as optim_mod

from .hooks import ModuleProbe
from .recorder import Recorder

logger = logging.getLogger(__name__)

GRAD_KINDS = ("grad", "optim_state", "param_after")


def _local(t: torch.Tensor) -> tuple[torch.Tensor, str | None]:
    """A DTensor's local shard and a note saying so; any other tensor as it is."""
    to_local = getattr(t, "to_local", None)
    if to_local is None or type(t).__name__ != "DTensor":
        return t, None
    placements = getattr(t, "placements", None)
    return to_local(), f"local shard of a DTensor (placements {placements}, global shape {list(t.shape)})"


class GradProbe:
    """Optimizer pre/post step hooks feeding the recorder for each optimizer's first steps."""

    def __init__(self, recorder: Recorder, modules: ModuleProbe) -> None:
        self.recorder = recorder
        self.modules = modules
        self.steps = recorder.config.grad_steps
        # id(optimizer) -> (weakref, label, steps taken); ids are checked against the weakref
        self._optimizers: dict[int, tuple[weakref.ref[Any], str, int]] = {}
        self._labels: dict[str, int] = {}
        self._handles: list[Any] = []

    def install(self) -> None:
        if self.steps <= 0:
            return
        self._handles = [optim_mod.register_optimizer_step_pre_hook(self._pre_hook),
                         optim_mod.register_optimizer_step_post_hook(self._post_hook)]

    def uninstall(self) -> None:
        for handle in self._handles:
            handle.remove()
        self._handles = []

    def done(self) -> bool:
        """Whether every optimizer seen so far has taken the steps whose gradients are recorded."""
        return all(entry[2] >= self.steps for entry in self._optimizers.values() if entry[0]() is not None)

    # ------------------------------------------------------------------ names
    def _entry(self, optimizer: Any) -> tuple[str, int]:
        """(label, steps taken so far) of ``optimizer``; a new optimizer gets its label here."""
        entry = self._optimizers.get(id(optimizer))
        if entry is not None and entry[0]() is optimizer:
            return entry[1], entry[2]
        cls = type(optimizer).__name__
        k = self._labels.get(cls, 0)
        self._labels[cls] = k + 1
        label = cls if k == 0 else f"{cls}_{k}"
        self._optimizers[id(optimizer)] = (weakref.ref(optimizer), label, 0)
        return label, 0

    def _param_names(self) -> dict[int, str]:
        """id(parameter) -> ``<root class>.<qualified name>`` over the outermost modules recorded; a
        name two roots of one class would both give goes to the first one only."""
        names: dict[int, str] = {}
        used: set[str] = set()
        for root_name, ref in self.modules.roots:
            root = ref()
            if root is None:
                continue
            for qualname, p in root.named_parameters(remove_duplicate=False):
                name = f"{root_name}.{qualname}"
                if id(p) not in names and name not in used:
                    names[id(p)] = name
                    used.add(name)
        return names

    def _params(self, optimizer: Any, label: str) -> list[tuple[str, torch.Tensor]]:
        known = self._param_names()
        out: list[tuple[str, torch.Tensor]] = []
        seen: set[str] = set()
        for g, group in enumerate(optimizer.param_groups):
            for i, p in enumerate(group.get("params", ())):
                if not isinstance(p, torch.Tensor):
                    continue
                name = known.get(id(p))
                if name is None or name in seen:
                    name = f"{label}.param_groups.{g}.{i}"
                seen.add(name)
                out.append((name, p))
        return out

    # ------------------------------------------------------------------ hooks
    def _active(self, optimizer: Any) -> tuple[str, int] | None:
        if torch.compiler.is_compiling() or self.recorder.stopped is not None:
            return None
        label, n = self._entry(optimizer)
        return (label, n) if n < self.steps else None

    def _add(self, key: str, tensor: torch.Tensor, kind: str, name: str, leaf: str, label: str, n: int) -> None:
        tensor, note = _local(tensor)
        module, _, attr = name.rpartition(".")
        fields: dict[str, Any] = {"kind": kind, "module": module or name, "call": n, "step": n, "leaf": leaf,
                                  "param": name, "attr": attr, "optimizer": label}
        if note is not None:
            fields["dtensor"] = note
        self.recorder.add_tensor(key, tensor, fields)

    def _record(self, optimizer: Any, after: bool) -> None:
        """Before step ``n``: every parameter's gradient; after it: its optimizer state and new value."""
        active = self._active(optimizer)
        if active is None:
            return
        label, n = active
        with torch.no_grad():
            for name, p in self._params(optimizer, label):
                if not after:
                    if p.grad is not None:
                        self._add(f"grad:{name}#{n}", p.grad, "grad", name, "grad", label, n)
                    continue
                state = optimizer.state.get(p) if hasattr(optimizer.state, "get") else None
                for key, value in (state or {}).items():
                    if isinstance(value, (int, float)) and not isinstance(value, bool):
                        value = torch.tensor(value)
                    if isinstance(value, torch.Tensor):
                        self._add(f"optim:{name}.{key}#{n}", value, "optim_state", name, str(key), label, n)
                self._add(f"param:{name}#{n}", p, "param_after", name, "value", label, n)
        if after:
            self.recorder.flush()

    def _pre_hook(self, optimizer: Any, args: Any, kwargs: Any) -> None:
        try:
            self._record(optimizer, after=False)
        except Exception:  # never break the user's step
            logger.debug("probe: gradients not recorded", exc_info=True)

    def _post_hook(self, optimizer: Any, args: Any, kwargs: Any) -> None:
        try:
            self._record(optimizer, after=True)
        except Exception:
            logger.debug("probe: optimizer state not recorded", exc_info=True)
        finally:
            entry = self._optimizers.get(id(optimizer))
            if entry is not None and entry[0]() is optimizer:
                self._optimizers[id(optimizer)] = (entry[0], entry[1], entry[2] + 1)
