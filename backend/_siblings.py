"""Ferry's top-level packages below the backend, under whatever root the backend itself was imported.

``backend`` on the host, ``<root>.backend`` where the bootstrap loaded it under a private root in a
user's process: its siblings (``backend_autoload``, ``cuda_semantics``) are imported under the same root.
"""

from __future__ import annotations

import importlib
from types import ModuleType

_ROOT = __name__.rpartition(".")[0].rpartition(".")[0]


def sibling(name: str) -> ModuleType:
    """Import Ferry's module ``name`` (``"cuda_semantics.graphs"``) under the backend's root."""
    return importlib.import_module((_ROOT + "." if _ROOT else "") + name)
