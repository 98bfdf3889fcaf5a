"""PyTorch device-backend autoload hook for Ferry's tpx device (``torch.backends`` entry point).

It lives outside the ``backend`` package on purpose: torch imports the entry point's module by
name during ``import torch``, and a user's own ``backend.py``/``backend/`` next to their script
would shadow Ferry's ``backend`` and make ``import torch`` itself fail. Here we first check that
``backend`` resolves to Ferry's package; if something else shadows it, tpx is simply not
autoloaded (a warning says so) and ``import torch`` keeps working.
"""

from __future__ import annotations

import importlib
import importlib.util
import logging
import sys
from pathlib import Path

logger = logging.getLogger(__name__)

_OURS = Path(__file__).resolve().parent.parent / "backend" / "__init__.py"


def _resolves_to_ours() -> bool:
    mod = sys.modules.get("backend")
    if mod is not None:
        origin = getattr(mod, "__file__", None)
    else:
        try:
            spec = importlib.util.find_spec("backend")
        except (ImportError, ValueError):
            return False
        origin = spec.origin if spec is not None else None
    try:
        return origin is not None and Path(origin).resolve() == _OURS
    except OSError:
        return False


def autoload() -> None:
    if not _resolves_to_ours():
        logger.warning(
            "tpx not autoloaded: the name 'backend' resolves to another module here; "
            "import Ferry's backend explicitly to use the tpx device"
        )
        return
    importlib.import_module("backend")._autoload()
