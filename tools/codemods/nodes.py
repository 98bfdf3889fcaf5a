"""Small helpers to read and build libcst nodes (no rule logic here)."""

from __future__ import annotations

import ast
import re
from collections.abc import Sequence

import libcst as cst

_EMPTY = cst.Module(body=[])
_CUDA_DEVICE_RE = re.compile(r"^cuda(?::(\d+))?$")


def code(node: cst.CSTNode) -> str:
    """Source text of ``node`` exactly as it appears (comments and spacing kept)."""
    return _EMPTY.code_for_node(node)


def expr(text: str) -> cst.BaseExpression:
    return cst.parse_expression(text)


def args_code(args: Sequence[cst.Arg]) -> str:
    """Source text of call arguments exactly as written (their commas, comments and spacing kept)."""
    return "".join(code(a) for a in args)


def args_then(args: Sequence[cst.Arg], more: str) -> str:
    """Source of ``args`` (kept as written) followed by ``more``; a trailing comma after the last
    argument (``f(2, 3,)``) is dropped so that the result stays valid."""
    if not args:
        return more
    last = args[-1].with_changes(comma=cst.MaybeSentinel.DEFAULT)
    return f"{args_code([*args[:-1], last])}, {more}"


def args_after(first: str, args: Sequence[cst.Arg]) -> str:
    """Source of an argument list that puts ``first`` before ``args`` (kept as written): ``first`` alone
    when there are none."""
    rest = args_code(args)
    return f"{first}, {rest}" if rest else first


def string_value(node: cst.CSTNode | None) -> str | None:
    """The value of a plain string literal, or None for anything else (f-strings, bytes...)."""
    if isinstance(node, cst.SimpleString):
        try:
            value = ast.literal_eval(node.value)
        except (ValueError, SyntaxError):
            return None
        return value if isinstance(value, str) else None
    return None


def cuda_device_string(node: cst.CSTNode | None) -> tuple[bool, int | None]:
    """(is a "cuda"/"cuda:N" literal, ordinal or None)."""
    value = string_value(node)
    if value is None:
        return False, None
    m = _CUDA_DEVICE_RE.match(value)
    if not m:
        return False, None
    return True, int(m.group(1)) if m.group(1) is not None else None


def int_value(node: cst.CSTNode | None) -> int | None:
    if isinstance(node, cst.Integer):
        return int(node.evaluated_value)
    return None


def bool_value(node: cst.CSTNode | None) -> bool | None:
    if isinstance(node, cst.Name) and node.value in ("True", "False"):
        return node.value == "True"
    return None


def kwarg(call: cst.Call, name: str) -> cst.Arg | None:
    for arg in call.args:
        if arg.keyword is not None and arg.keyword.value == name:
            return arg
    return None


def positional(call: cst.Call) -> list[cst.Arg]:
    return [a for a in call.args if a.keyword is None and not a.star]


def _fix_last_comma(args: list[cst.Arg]) -> list[cst.Arg]:
    last = args[-1] if args else None
    # keep a trailing comma only when the original call was laid out one arg per line
    if last is not None and isinstance(last.comma, cst.Comma) and "\n" not in code(last.comma):
        args[-1] = last.with_changes(comma=cst.MaybeSentinel.DEFAULT)
    return args


def without_kwargs(call: cst.Call, names: set[str]) -> cst.Call:
    kept = [a for a in call.args if not (a.keyword is not None and a.keyword.value in names)]
    if len(kept) == len(call.args):
        return call
    return call.with_changes(args=_fix_last_comma(list(kept)))


def without_arg(call: cst.Call, index: int) -> cst.Call:
    kept = [a for i, a in enumerate(call.args) if i != index]
    return call.with_changes(args=_fix_last_comma(kept))


def dotted(node: cst.CSTNode) -> str | None:
    """``a.b.c`` for a Name/Attribute chain, else None (purely syntactic)."""
    if isinstance(node, cst.Name):
        return node.value
    if isinstance(node, cst.Attribute):
        base = dotted(node.value)
        return f"{base}.{node.attr.value}" if base else None
    return None


def _is_import_line(stmt: cst.CSTNode) -> bool:
    return isinstance(stmt, cst.SimpleStatementLine) and all(
        isinstance(s, (cst.Import, cst.ImportFrom)) for s in stmt.body)


def _is_docstring(stmt: cst.CSTNode) -> bool:
    return (isinstance(stmt, cst.SimpleStatementLine) and len(stmt.body) == 1
            and isinstance(stmt.body[0], cst.Expr)
            and isinstance(stmt.body[0].value, (cst.SimpleString, cst.ConcatenatedString)))


def _is_try_import(stmt: cst.CSTNode) -> bool:
    """``try: import x`` / ``except ImportError: ...``: its body only imports."""
    return isinstance(stmt, cst.Try) and all(_is_import_line(s) for s in stmt.body.body)


def header_length(module: cst.Module, *, try_imports: bool = False) -> int:
    """How many leading statements of ``module`` are its docstring and import block (what generated
    statements go after); ``try_imports`` counts ``try:`` blocks that only import as imports too."""
    index = 0
    body = module.body
    while index < len(body) and (_is_import_line(body[index]) or (index == 0 and _is_docstring(body[index]))
                                 or (try_imports and _is_try_import(body[index]))):
        index += 1
    return index


_ATOMS = (cst.Name, cst.Attribute, cst.Call, cst.Subscript, cst.List, cst.Dict, cst.Set, cst.ListComp,
          cst.SetComp, cst.DictComp, cst.SimpleString, cst.ConcatenatedString, cst.FormattedString)


def atom(node: cst.BaseExpression) -> cst.BaseExpression:
    """``node`` usable as the receiver of an attribute (``a + b`` -> ``(a + b)``; names, calls,
    subscripts and displays as they are)."""
    if isinstance(node, _ATOMS) or node.lpar:
        return node
    return node.with_changes(lpar=[cst.LeftParen()], rpar=[cst.RightParen()])


def method_call(receiver: cst.BaseExpression, method: str, args: Sequence[cst.Arg] = ()) -> cst.Call:
    """``receiver.method(args)``, the receiver parenthesised where it needs it."""
    return cst.Call(func=cst.Attribute(value=atom(receiver), attr=cst.Name(method)), args=list(args))


def _arg_indent(call: cst.Call) -> cst.SimpleWhitespace | None:
    """The indentation of a call's argument lines when its arguments start lines (one per line after
    the opening parenthesis, or hanging after the first), else None."""
    lead = call.whitespace_before_args
    if isinstance(lead, cst.ParenthesizedWhitespace):
        return lead.last_line
    for arg in reversed(call.args[:-1]):
        ws = arg.comma.whitespace_after if isinstance(arg.comma, cst.Comma) else None
        if isinstance(ws, cst.ParenthesizedWhitespace):
            return ws.last_line
    return None


def add_kwarg(call: cst.Call, keyword: str, value: cst.BaseExpression) -> cst.Call:
    """``call`` with ``keyword=value`` after its last argument, laid out like the call: where the last
    argument ends its line (arguments one per line, the closing parenthesis on its own line) the new
    one gets a line of its own, indented like the others, and comments and the trailing comma stay
    where they were; on one line it follows ``, `` (a trailing comma of a one-line call is dropped)."""
    new = cst.Arg(value=value, keyword=cst.Name(keyword),
                  equal=cst.AssignEqual(whitespace_before=cst.SimpleWhitespace(""),
                                        whitespace_after=cst.SimpleWhitespace("")))
    args = list(call.args)
    if not args:
        return call.with_changes(args=[new])
    last = args[-1]
    trailing = isinstance(last.comma, cst.Comma)
    after = last.comma.whitespace_after if isinstance(last.comma, cst.Comma) else last.whitespace_after_arg
    comma = last.comma if isinstance(last.comma, cst.Comma) else cst.Comma()
    indent = _arg_indent(call)
    if isinstance(after, cst.ParenthesizedWhitespace) and indent is not None:
        # the last argument keeps its line end (comment, blank lines); the new one starts the next line
        closing = cst.ParenthesizedWhitespace(first_line=cst.TrailingWhitespace(), indent=after.indent,
                                              last_line=after.last_line)
        args[-1] = last.with_changes(comma=comma.with_changes(whitespace_after=after.with_changes(last_line=indent)),
                                     whitespace_after_arg=cst.SimpleWhitespace(""))
        new = (new.with_changes(comma=cst.Comma(whitespace_after=closing)) if trailing
               else new.with_changes(whitespace_after_arg=closing))
    elif isinstance(after, cst.ParenthesizedWhitespace):
        # f(a,  # note\n): the new argument goes before what ends the line
        args[-1] = last.with_changes(comma=comma.with_changes(whitespace_after=cst.SimpleWhitespace(" ")),
                                     whitespace_after_arg=cst.SimpleWhitespace(""))
        new = new.with_changes(comma=last.comma) if trailing else new.with_changes(whitespace_after_arg=after)
    else:
        args[-1] = last.with_changes(comma=comma.with_changes(whitespace_after=cst.SimpleWhitespace(" ")),
                                     whitespace_after_arg=cst.SimpleWhitespace(""))
        if not trailing:
            new = new.with_changes(whitespace_after_arg=last.whitespace_after_arg)
    return call.with_changes(args=[*args, new])


def cuda_call_to(updated: cst.CSTNode, device: str) -> cst.Call:
    """``x.cuda(i, non_blocking=b)`` / ``x.cuda(device=i)`` -> ``x.to(<device>, non_blocking=b)``: the
    index (first positional or ``device=``) gives way to ``device``, the other arguments stay."""
    assert isinstance(updated, cst.Call) and isinstance(updated.func, cst.Attribute)
    call = updated
    if call.args and (call.args[0].keyword is None or call.args[0].keyword.value == "device"):
        call = call.with_changes(args=call.args[1:])
    call = without_kwargs(call, {"device"})
    new = expr(f"_.to({args_after(device, call.args)})")
    assert isinstance(new, cst.Call) and isinstance(new.func, cst.Attribute)
    return updated.with_changes(func=updated.func.with_changes(attr=cst.Name("to")), args=new.args)
