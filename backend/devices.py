"""Which tpx devices this process sees and which one is current (``torch.tpx.device_count``,
``current_device``), and the index a device argument names."""

from __future__ import annotations

import torch

from . import _ext, config


def device_count() -> int:
    """The visible tpx devices (TPX_DEVICE_COUNT, narrowed by TPX_VISIBLE_DEVICES)."""
    return config.get_config().visible_count


def current_device() -> int:
    if not _ext.is_loaded():
        return 0
    return _ext.get().current_device()


def _index(device=None, check: bool = True) -> int:
    """The device index ``device`` names (None, "tpx": the current device); with ``check``, one
    that is visible (else the invalid-ordinal error, naming TPX_DEVICE_COUNT/TPX_VISIBLE_DEVICES)."""
    if device is None:
        idx = current_device()
    elif isinstance(device, int) and not isinstance(device, bool):
        idx = device
    else:
        dev = torch.device(device)
        if dev.type != "tpx":
            raise ValueError(f"Expected a tpx device, but got: {dev}")
        idx = current_device() if dev.index is None else dev.index
    if check and not 0 <= idx < device_count():
        raise RuntimeError(ordinal_error(idx))
    return idx


def ordinal_error(idx: int) -> str:
    """What CUDA says for a bad device ordinal, with the settings that decide tpx's devices."""
    cfg = config.get_config()
    n = cfg.visible_count
    if n == 0:
        return (f"tpx error: no tpx device is visible ({cfg.device_hint()}); unset TPX_VISIBLE_DEVICES "
                "or list the devices to use, e.g. TPX_VISIBLE_DEVICES=0")
    return (f"tpx error: invalid device ordinal: tpx:{idx} requested but only {n} tpx device(s) are "
            f"visible, tpx:0..tpx:{n - 1} ({cfg.device_hint()}; raise TPX_DEVICE_COUNT for more devices)")


