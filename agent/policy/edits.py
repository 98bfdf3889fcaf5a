"""The parse check of an edited file, for the nodes that apply edits (``apply_fix``) and the model's
edit tools. The policy's edits themselves are :mod:`tools.codemods.fixes` (libcst)."""

from __future__ import annotations

from agent.errors import EditRejected
from tools.codemods.fixes import syntax_error


def check_parses(text: str, rel: str) -> None:
    """Raise :class:`EditRejected` saying where when ``text`` (the new ``rel``) is not valid Python."""
    error = syntax_error(text, rel)
    if error is not None:
        raise EditRejected(f"the edited {rel} does not parse: {error}")
