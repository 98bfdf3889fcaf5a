"""The CUDA device string a user gives on the command line (``--device cuda``, ``--device cuda:1``).

A migrated program that parses ``--device`` as a string hands it to ``.to(args.device)`` and
``torch.device(args.device)``: where CUDA is absent, "cuda" then fails although an accelerator is
there. FRY054 inserts, once per module, the helper below and one call right after the parse
(``args.device = ferry_cli_device(args.device)``): a CUDA device string names the available
accelerator with the same index; any other value ("cpu", "mps") and every value on a machine with
CUDA (or with no accelerator at all) are kept as they are. The helper compares with "cuda" on
purpose: :func:`inside_helper` lets the other rules leave its body alone, so a second run changes
nothing.
"""

from __future__ import annotations

from collections.abc import Callable

import libcst as cst

HELPER_NAME = "ferry_cli_device"

#: the helper's source (``torch.`` is the module's own alias for torch once inserted)
HELPER_SOURCE = f'''def {HELPER_NAME}(name):
    """Ferry: a CUDA device named on the command line ("cuda", "cuda:1") selects the available
    accelerator, with the same index, where CUDA is absent. Other values ("cpu", "mps"), and every
    value where CUDA is present or no accelerator is, stay as they are."""
    accelerator = torch.accelerator.current_accelerator(check_available=True)
    if not isinstance(name, str) or accelerator is None or accelerator.type == "cuda":
        return name
    kind, colon, index = name.partition(":")
    return accelerator.type + colon + index if kind == "cuda" else name
'''

#: the comment above the inserted call: what a reviewer of the diff needs to know
CALL_COMMENT = "# Ferry: a CUDA --device (cuda, cuda:N) selects the available accelerator where CUDA is absent"


def call_statement(target: str) -> cst.SimpleStatementLine:
    """``args.device = ferry_cli_device(args.device)`` for the option's ``target`` (``args.device``), with
    :data:`CALL_COMMENT` on the line above."""
    stmt = cst.parse_statement(f"{target} = {HELPER_NAME}({target})\n")
    assert isinstance(stmt, cst.SimpleStatementLine)
    return stmt.with_changes(leading_lines=[cst.EmptyLine(comment=cst.Comment(CALL_COMMENT))])


def is_helper_call(node: cst.CSTNode) -> bool:
    """``ferry_cli_device(...)``: the mapping is already there."""
    return isinstance(node, cst.Call) and isinstance(node.func, cst.Name) and node.func.value == HELPER_NAME


def inside_helper(node: cst.CSTNode, parent_of: Callable[[cst.CSTNode], cst.CSTNode | None]) -> bool:
    """Whether ``node`` sits in the body of Ferry's inserted helper (a module-level ``def ferry_cli_device``)."""
    current = parent_of(node)
    while current is not None:
        if isinstance(current, cst.FunctionDef):
            return current.name.value == HELPER_NAME and isinstance(parent_of(current), cst.Module)
        current = parent_of(current)
    return False
