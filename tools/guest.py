"""How Ferry's child-side code reaches Ferry's other top-level packages (standard library only).

Inside a user's process the bootstrap (``tools/runner/child/sitecustomize.py``) imports Ferry's
child-side modules under one private parent package (``_ferry_guest.tools.redirect...``,
``_ferry_guest.backend``), never as bare ``tools``/``backend``/``sandbox``: those names belong to
the user's repository. On the host the same files are the ordinary ``tools.*``/``backend.*``.
Inside a package the child-side modules import each other relatively; across top-level packages
they go through here, which keeps whatever root this module itself was imported under.
"""

from __future__ import annotations

import importlib
import sys
from types import ModuleType

# "" on the host, "_ferry_guest." inside a user's process
ROOT_PREFIX = __name__[: -len("tools.guest")]


def sibling(name: str) -> ModuleType:
    """Import Ferry's module ``name`` (``"sandbox.envvars"``) under the root this code runs under."""
    return importlib.import_module(ROOT_PREFIX + name)


def is_own_module(name: str) -> bool:
    """Whether the module called ``name`` is one of Ferry's child-side ones (under this root)."""
    return any(name == ROOT_PREFIX + p or name.startswith(ROOT_PREFIX + p + ".")
               for p in ("tools", "backend", "backend_autoload", "cuda_semantics", "sandbox"))


def tpx_backend_module(sub: str) -> ModuleType | None:
    """The already loaded module ``sub`` (``"kernels"``, ``"bridge"``) of the package that registered
    ``torch.tpx`` in this process, whatever its import name; None when tpx is not loaded. Never
    imports anything: a CPU run must not register tpx by asking about it."""
    torch = sys.modules.get("torch")
    device_module = getattr(torch, "tpx", None) if torch is not None else None
    package = (getattr(device_module, "__name__", "") or "").rpartition(".")[0]
    if not package:
        return None
    return sys.modules.get(f"{package}.{sub}")
