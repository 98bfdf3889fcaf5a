"""Mixed-device error -> add the device to the tensor that was created without one."""

from __future__ import annotations

import ast
import logging

from agent.policy.base import Diagnosis, FixContext, Proposal, first_site_fix
from agent.policy import edits

logger = logging.getLogger(__name__)

RULE = "add_missing_device"
KINDS = ("mixed_devices",)


def _is_factory(call: ast.Call) -> bool:
    name = edits.dotted_name(call.func)
    return name.startswith("torch.") and name.split(".")[-1] in edits.FACTORIES and not edits.has_kwarg(call, "device")


def _enclosing_scope(tree: ast.Module, lineno: int) -> ast.AST:
    best: ast.AST = tree
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.lineno <= lineno <= (node.end_lineno or node.lineno):
            if best is tree or node.lineno >= best.lineno:  # type: ignore[attr-defined]
                best = node
    return best


def _names_defined(scope: ast.AST) -> set[str]:
    out: set[str] = set()
    for node in ast.walk(scope):
        if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            out.add(node.id)
        elif isinstance(node, ast.arg):
            out.add(node.arg)
    return out


def _device_expr(tree: ast.Module, scope: ast.AST, lineno: int, skip: set[str], text: str) -> str | None:
    """``device`` if such a variable is in scope, else ``<other tensor>.device`` from the failing line."""
    module_names = {t.id for n in tree.body if isinstance(n, ast.Assign) for t in n.targets if isinstance(t, ast.Name)}
    if "device" in _names_defined(scope) or "device" in module_names:
        return "device"
    stmt_names = [n.id for call in edits.calls_at(tree, lineno) for n in ast.walk(call) if isinstance(n, ast.Name)]
    line = edits.lines_of(text)[lineno - 1]
    for name in edits.NAME_RE.findall(line) + stmt_names:
        if name in skip or name in ("torch", "self", "nn", "F", "np") or not name.isidentifier():
            continue
        if name in _names_defined(scope):
            return f"{name}.device"
    return None


def _fix(text: str, rel: str, lineno: int) -> str | None:
    tree = edits.parse(text, rel)
    if tree is None:
        return None
    scope = _enclosing_scope(tree, lineno)
    # 1. a factory call on the failing line itself.
    for call in edits.calls_at(tree, lineno):
        if _is_factory(call) and call.lineno == lineno:
            dev = _device_expr(tree, scope, lineno, set(), text)
            return edits.insert_kwarg(text, call, f"device={dev}") if dev else None
    # 2. a name used on the failing line, last assigned (before it, same scope) from a factory.
    line = edits.lines_of(text)[lineno - 1]
    used = set(edits.NAME_RE.findall(line))
    candidates: list[tuple[int, str, ast.Call]] = []
    for node in ast.walk(scope):
        if isinstance(node, ast.Assign) and node.lineno < lineno and isinstance(node.value, ast.Call):
            for target in node.targets:
                if isinstance(target, ast.Name) and target.id in used and _is_factory(node.value):
                    candidates.append((node.lineno, target.id, node.value))
    if not candidates:
        return None
    _, name, call = max(candidates, key=lambda c: c[0])
    dev = _device_expr(tree, scope, lineno, {name}, text)
    return edits.insert_kwarg(text, call, f"device={dev}") if dev else None


def apply(diag: Diagnosis, ctx: FixContext) -> Proposal | None:
    if diag.kind not in KINDS:
        return None
    return first_site_fix(
        ctx, diag, rule=RULE, fix=lambda frame, text: _fix(text, frame.file, frame.line),
        reason=lambda site: f"mixed devices at {site} ({diag.first_line}): "
                            "create the tensor on the device it is used with",
    )
