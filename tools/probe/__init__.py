"""Numeric probe: records module outputs/inputs, printed scalars and explicit records.

Public API for user code: ``tools.probe.record(name, tensor)`` — a no-op outside a probed run.
"""

from __future__ import annotations

import sys
from typing import Any

_SYS_ATTR = "_ferry_probe_recorder"


def record(name: str, value: Any) -> None:
    """Record a tensor (or a Python number) under ``name`` when running under a probe.

    Outside a probed run this does nothing and costs one function call. Each call with the
    same name gets the next call index, so records in a loop line up between two runs.
    """
    active = getattr(sys, _SYS_ATTR, None)  # see tools/probe/recorder.py
    if active is None:
        return
    import torch

    call = active.next_explicit_call(name)
    if not isinstance(value, torch.Tensor):
        try:
            value = torch.tensor(value)
        except Exception:  # not a number: nothing to compare
            return
    active.add_tensor(f"record:{name}#{call}", value,
                      {"kind": "record", "module": f"record:{name}", "call": call, "leaf": "value"})


def is_active() -> bool:
    return getattr(sys, _SYS_ATTR, None) is not None
