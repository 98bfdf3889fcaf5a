"""The tpx accelerator: a PyTorch PrivateUse1 backend that computes on the CPU.

``import backend`` registers the ``tpx`` device (also done by PyTorch's device-backend autoload
through the ``torch.backends`` entry point, see ``_autoload``). Registration is cheap: the small
C++ extension (allocator, hooks, device guard, zero-copy aliasing) is loaded from its cache right
away when it is already built, otherwise it is compiled on first use of the device.

Public surface: ``backend.configure(...)``, ``backend.get_config()``, ``backend.bridge`` and the
``torch.tpx`` device module. See docs/backend.md.
"""

from __future__ import annotations

import logging

logger = logging.getLogger(__name__)

REQUIRED_TORCH = "2.13.0"
DEVICE = "tpx"

_registered = False


class TorchVersionError(ImportError):
    """The installed torch is not the exact version the tpx backend was written against."""


def _check_torch_version() -> None:
    import torch

    found = torch.__version__.split("+")[0]
    if found != REQUIRED_TORCH:
        raise TorchVersionError(
            f"the tpx backend needs torch=={REQUIRED_TORCH} exactly (it uses private PyTorch APIs), "
            f"but torch {torch.__version__} is installed. Reinstall with "
            f"`pip install torch=={REQUIRED_TORCH}` (run scripts/setup)."
        )


def register() -> None:
    """Register the tpx device with PyTorch (idempotent)."""
    global _registered
    if _registered:
        return
    _check_torch_version()  # imports torch, whose autoload may re-enter register()
    if _registered:
        return
    from . import _registration

    _registration.register()
    from . import compile as _compile

    _compile.register()  # torch.compile backend "tpx"
    _registered = True


def configure(**kwargs):
    """Change tpx settings at run time; returns the new config. See ``backend.config.TpxConfig``."""
    from . import config

    return config.configure(**kwargs)


def get_config():
    from . import config

    return config.get_config()


def _autoload() -> None:
    """Entry point for PyTorch's device-backend autoload (group ``torch.backends``)."""
    try:
        register()
    except TorchVersionError as exc:  # never break `import torch` for an unrelated project
        logger.warning("tpx not registered: %s", exc)


def _called_from_autoload() -> bool:
    import sys

    frame = sys._getframe(1)
    while frame is not None:
        if frame.f_code.co_name == "_import_device_backends":
            return True
        frame = frame.f_back
    return False


try:
    register()
except TorchVersionError as _exc:
    if not _called_from_autoload():
        raise
    logger.warning("tpx not registered: %s", _exc)
