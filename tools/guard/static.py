"""The static guard: a patch read with libcst, file by file, for changes that weaken the tests.

Test modules are pytest's default names (``test_*.py``, ``*_test.py``); their test functions are the
module's ``test*`` functions and the ``test*`` methods of its ``Test*`` classes (and of unittest cases).
Each function is compared before and after the edit: gone (GRD001), more skip/xfail markers or calls
(GRD002), fewer assertions (GRD003), a tolerance above both its old value and the numerics policy's
loosest figure (GRD004), more try blocks around an assertion whose handler does not re-raise (GRD005).
conftest.py's collection hooks and ``collect_ignore``, and the pytest sections of pytest.ini, tox.ini,
setup.cfg and pyproject.toml, must stay as they were (GRD006). FIX008's tpx-only precision statement in a
test module is noted as the documented exception, never refused.
"""

from __future__ import annotations

import configparser
import logging
import re
import tomllib
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import PurePosixPath

import libcst as cst
from libcst.metadata import MetadataWrapper, PositionProvider

from tools.codemods.fixes.fix008_target_matmul_precision import MARKER
from tools.guard.models import FileEdit, GuardFinding, GuardNote, GuardRequest, GuardResult
from tools.parity.tolerances import ASSERT_CLOSE

logger = logging.getLogger(__name__)

#: the loosest figures the numerics policy (docs/numerics.md, tools/parity/tolerances.py) grants any
#: floating dtype: assert_close's bfloat16 row (rtol 1.6e-2) and its widest atol (1e-5). A tolerance may
#: be raised up to these without the guard's word; above them only with the user's approval.
RTOL_CEILING = max(r for r, _ in ASSERT_CLOSE.values())
ATOL_CEILING = max(a for _, a in ASSERT_CLOSE.values())

_RELATIVE = frozenset({"rtol", "rel", "rel_tol"})
_ABSOLUTE = frozenset({"atol", "abs", "abs_tol", "delta"})
_DIGITS = frozenset({"places", "decimal"})  # assertAlmostEqual / numpy's assert_almost_equal: 10**-n absolute

_SKIP_DECORATORS = frozenset({"skip", "skipif", "xfail", "skipIf", "skipUnless", "expectedFailure", "usefixtures_skip"})
_SKIP_CALLS = frozenset({"pytest.skip", "pytest.xfail", "skipTest", "pytest.importorskip"})
_COLLECTION_NAMES = frozenset({"collect_ignore", "collect_ignore_glob", "pytest_plugins"})
_COLLECTION_HOOKS = frozenset({"pytest_collection_modifyitems", "pytest_ignore_collect", "pytest_collect_file",
                               "pytest_pycollect_makeitem", "pytest_pycollect_makemodule", "pytest_generate_tests",
                               "pytest_runtest_setup", "pytest_configure", "pytest_collect_directory",
                               "pytest_deselected", "pytest_collection", "pytest_runtest_call"})
_SWALLOWED = frozenset({"", "Exception", "BaseException", "AssertionError"})
_TEST_FILE = re.compile(r"(^test_.*|.*_test)\.py$")
_NUMBER = re.compile(r"^[0-9_.eE+-]+$")


def is_test_module(path: str) -> bool:
    return bool(_TEST_FILE.match(PurePosixPath(path).name))


def dotted(node: cst.BaseExpression) -> str:
    """``pytest.mark.skip`` for an attribute chain (the callee of a call), "" for anything else."""
    if isinstance(node, cst.Call):
        return dotted(node.func)
    if isinstance(node, cst.Name):
        return node.value
    if isinstance(node, cst.Attribute):
        head = dotted(node.value)
        return f"{head}.{node.attr.value}" if head else ""
    return ""


def _number(node: cst.BaseExpression) -> float | None:
    """A numeric literal (``1``, ``1e-3``, ``-2``, ``1.0``), else None."""
    neg = False
    if isinstance(node, cst.UnaryOperation) and isinstance(node.operator, cst.Minus):
        node, neg = node.expression, True
    if isinstance(node, cst.Integer | cst.Float) and _NUMBER.match(node.value):
        try:
            value = float(node.value.replace("_", ""))
        except ValueError:
            return None
        return -value if neg else value
    return None


@dataclass
class Tolerance:
    kind: str  # "relative" or "absolute"
    value: float  # as a tolerance: larger is looser
    line: int
    keyword: str


@dataclass
class TestFunction:
    __test__ = False  # not a pytest class

    name: str
    line: int
    assertions: int = 0
    skips: list[int] = field(default_factory=list)
    swallowing: list[int] = field(default_factory=list)
    tolerances: list[Tolerance] = field(default_factory=list)


def _is_assertion_call(name: str) -> bool:
    last = name.rsplit(".", 1)[-1]
    return last.lower().startswith("assert") or name in {"pytest.raises", "pytest.warns", "pytest.fail",
                                                          "pytest.approx"} or last == "fail"


def _is_difference_size(node: cst.BaseExpression) -> bool:
    """``abs(...)``, ``math.fabs(...)``, ``(...).abs()``, ``torch.abs(...)``, with ``.max()``/``.item()`` after."""
    while isinstance(node, cst.Call) and isinstance(node.func, cst.Attribute) and node.func.attr.value in (
            "max", "item", "amax", "sum", "mean"):
        node = node.func.value
    if not isinstance(node, cst.Call):
        return False
    name = dotted(node.func)
    return name.rsplit(".", 1)[-1] in {"abs", "fabs"} or (isinstance(node.func, cst.Attribute)
                                                           and node.func.attr.value == "abs")


def _catches_broadly(handler: cst.ExceptHandler) -> bool:
    if handler.type is None:
        return True
    types = handler.type.elements if isinstance(handler.type, cst.Tuple) else [handler.type]
    for t in types:
        value = t.value if isinstance(t, cst.Element) else t
        if isinstance(value, cst.BaseExpression) and dotted(value).rsplit(".", 1)[-1] in _SWALLOWED:
            return True
    return False


class _Body(cst.CSTVisitor):
    """What one test function's body holds."""

    def __init__(self, fn: TestFunction, lines: dict[cst.CSTNode, int]) -> None:
        self.fn = fn
        self.lines = lines

    def visit_Assert(self, node: cst.Assert) -> None:
        self.fn.assertions += 1
        test = node.test
        # ``assert abs(a - b) < 1e-6``: the bound of a difference is an absolute tolerance
        if (isinstance(test, cst.Comparison) and len(test.comparisons) == 1
                and isinstance(test.comparisons[0].operator, cst.LessThan | cst.LessThanEqual)
                and _is_difference_size(test.left)):
            value = _number(test.comparisons[0].comparator)
            if value is not None:
                self.fn.tolerances.append(Tolerance("absolute", value, self.lines.get(node, self.fn.line), "bound"))

    def visit_Call(self, node: cst.Call) -> None:
        name = dotted(node.func)
        if _is_assertion_call(name):
            self.fn.assertions += 1
        if name in _SKIP_CALLS or name.rsplit(".", 1)[-1] == "skipTest":
            self.fn.skips.append(self.lines.get(node, self.fn.line))
        for i, arg in enumerate(node.args):
            keyword = arg.keyword.value if arg.keyword is not None else None
            if keyword is None and name.endswith("approx") and i in (1, 2):  # approx(expected, rel, abs)
                keyword = "rel" if i == 1 else "abs"
            if keyword is None:
                continue
            value = _number(arg.value)
            if value is None:
                continue
            line = self.lines.get(arg, self.lines.get(node, self.fn.line))
            if keyword in _RELATIVE:
                self.fn.tolerances.append(Tolerance("relative", value, line, keyword))
            elif keyword in _ABSOLUTE:
                self.fn.tolerances.append(Tolerance("absolute", value, line, keyword))
            elif keyword in _DIGITS:
                self.fn.tolerances.append(Tolerance("absolute", 10.0 ** -value, line, keyword))

    def visit_Try(self, node: cst.Try) -> None:
        holder = TestFunction("", 0)
        node.body.visit(_Body(holder, self.lines))
        if holder.assertions and any(_catches_broadly(h) and not _reraises(h) for h in node.handlers):
            self.fn.swallowing.append(self.lines.get(node, self.fn.line))


def _reraises(handler: cst.ExceptHandler) -> bool:
    found: list[bool] = []

    class _Raise(cst.CSTVisitor):
        def visit_Raise(self, node: cst.Raise) -> None:
            found.append(True)

        def visit_Call(self, node: cst.Call) -> None:
            if dotted(node.func) in {"pytest.fail", "self.fail"}:
                found.append(True)

    handler.body.visit(_Raise())
    return bool(found)


def _skip_decorator(dec: cst.Decorator) -> bool:
    name = dotted(dec.decorator)
    return name.rsplit(".", 1)[-1] in _SKIP_DECORATORS and ("mark" in name or "unittest" in name or
                                                            name in {"skip", "skipIf", "skipUnless",
                                                                     "expectedFailure"})


class _Module(cst.CSTVisitor):
    """The test functions of a test module, and its module-level skips."""

    def __init__(self, lines: dict[cst.CSTNode, int]) -> None:
        self.functions: dict[str, TestFunction] = {}
        self.module_skips: list[int] = []
        self._class: list[tuple[str, bool]] = []  # (name, holds tests)
        self._depth = 0  # inside a function
        self.lines = lines

    def _line(self, node: cst.CSTNode) -> int:
        return self.lines.get(node, 0)

    def visit_ClassDef(self, node: cst.ClassDef) -> None:
        self._class.append((node.name.value, node.name.value.startswith("Test") or any(
            dotted(b.value).endswith("TestCase") for b in node.bases)))
        if self._class[-1][1] and not self._depth:
            for dec in node.decorators:
                if _skip_decorator(dec):
                    self.module_skips.append(self._line(dec))

    def leave_ClassDef(self, original_node: cst.ClassDef) -> None:
        self._class.pop()

    def visit_FunctionDef(self, node: cst.FunctionDef) -> bool:
        if self._depth:
            return False
        name = node.name.value
        in_class = bool(self._class)
        testish = name.startswith("test") and (not in_class or self._class[-1][1])
        if testish and len(self._class) <= 1:
            qual = f"{self._class[-1][0]}.{name}" if in_class else name
            fn = TestFunction(qual, self._line(node))
            fn.skips += [self._line(d) for d in node.decorators if _skip_decorator(d)]
            node.body.visit(_Body(fn, self.lines))
            self.functions[qual] = fn
        self._depth += 1
        return False

    def leave_FunctionDef(self, original_node: cst.FunctionDef) -> None:
        self._depth -= 1

    def visit_Assign(self, node: cst.Assign) -> None:
        if self._depth or self._class:
            return
        for target in node.targets:
            name = dotted(target.target)
            marks = [dotted(e.value) for e in node.value.elements] if isinstance(
                node.value, cst.List | cst.Tuple) else [dotted(node.value)]
            if name == "pytestmark" and any(m.rsplit(".", 1)[-1] in _SKIP_DECORATORS for m in marks):
                self.module_skips.append(self._line(node))
            if name == "__test__" and isinstance(node.value, cst.Name) and node.value.value == "False":
                self.module_skips.append(self._line(node))

    def visit_Call(self, node: cst.Call) -> None:
        if not self._depth and dotted(node.func) in _SKIP_CALLS:
            self.module_skips.append(self._line(node))


def _parse(path: str, text: str | None) -> _Module | None:
    if text is None:
        return None
    try:
        wrapper = MetadataWrapper(cst.parse_module(text))
    except cst.ParserSyntaxError as exc:
        logger.info("guard: %s does not parse (%s); its tests are not read", path, exc)
        return None
    lines = {node: pos.start.line for node, pos in wrapper.resolve(PositionProvider).items()}
    visitor = _Module(lines)
    wrapper.module.visit(visitor)
    return visitor


def _passed_names(node_ids: list[str]) -> list[tuple[str, str]]:
    """(module path without .py, test function name) of each node id, as pytest's junit names them."""
    out = []
    for nid in node_ids:
        path, _, rest = nid.partition("::")
        func = rest.rsplit("::", 1)[-1].split("[", 1)[0]
        out.append((path.removesuffix(".py"), func))
    return out


def _passed_on_reference(path: str, fn: str, passed: list[tuple[str, str]] | None,
                         known_modules: set[str]) -> bool:
    """Whether the reference passed ``fn`` of ``path``; a test the reference's report does not name (no
    report, or none of that module's tests in it) counts as passed: the guard cannot tell otherwise."""
    if passed is None:
        return True
    mod = path.removesuffix(".py")

    def same(m: str) -> bool:  # junit names a class's tests module/Class; a rootdir below the repo shortens it
        return m == mod or m.startswith(mod + "/") or mod.endswith("/" + m)

    if not any(same(m) for m in known_modules):
        return True
    return fn.rsplit(".", 1)[-1] in {f for m, f in passed if same(m)}


def _test_module(edit: FileEdit, passed: list[tuple[str, str]] | None, known: set[str]) -> Iterator[GuardFinding]:
    before, after = _parse(edit.path, edit.before), _parse(edit.path, edit.after if edit.after is not None else "")
    if before is None or after is None:
        return
    for name, old in before.functions.items():
        new = after.functions.get(name)
        if new is None:
            if _passed_on_reference(edit.path, name, passed, known):
                yield GuardFinding(rule="GRD001", file=edit.path, line=old.line, test=name,
                                   detail=f"the test {name} (line {old.line} before the edit) is gone")
            continue
        if len(new.skips) > len(old.skips):
            yield GuardFinding(rule="GRD002", file=edit.path, line=max(new.skips), test=name,
                               detail=f"a skip or xfail is added to {name}")
        if new.assertions < old.assertions:
            yield GuardFinding(rule="GRD003", file=edit.path, line=new.line, test=name,
                               detail=f"{name} holds {new.assertions} assertion(s), {old.assertions} before")
        if len(new.swallowing) > len(old.swallowing):
            yield GuardFinding(rule="GRD005", file=edit.path, line=max(new.swallowing), test=name,
                               detail=f"an assertion of {name} is inside try/except that does not re-raise")
        seen: dict[str, int] = {}
        for tol in new.tolerances:
            ceiling = RTOL_CEILING if tol.kind == "relative" else ATOL_CEILING
            # the k-th tolerance of a keyword is compared with the k-th one before; a new one with the loosest
            olds = [t.value for t in old.tolerances if t.keyword == tol.keyword]
            k = seen[tol.keyword] = seen.get(tol.keyword, -1) + 1
            was = olds[k] if k < len(olds) else max((t.value for t in old.tolerances if t.kind == tol.kind),
                                                    default=0.0)
            if tol.value > ceiling and tol.value > was:
                yield GuardFinding(rule="GRD004", file=edit.path, line=tol.line, test=name,
                                   detail=(f"{tol.keyword}={tol.value:g} in {name} is looser than before "
                                           f"({was:g}) and than the numerics policy's {tol.kind} ceiling "
                                           f"{ceiling:g}"))
    if len(after.module_skips) > len(before.module_skips):
        yield GuardFinding(rule="GRD002", file=edit.path, line=max(after.module_skips),
                           detail="a module- or class-level skip/xfail (or __test__ = False) is added")


def _collection_parts(text: str | None) -> dict[str, tuple[str, int]]:
    """conftest.py's parts that decide collection: name -> (code, line)."""
    if not text:
        return {}
    try:
        wrapper = MetadataWrapper(cst.parse_module(text))
    except cst.ParserSyntaxError:
        return {"<unparsable>": (text, 1)}
    module = wrapper.module
    positions = wrapper.resolve(PositionProvider)
    parts: dict[str, tuple[str, int]] = {}
    for stmt in module.body:
        name = ""
        if isinstance(stmt, cst.FunctionDef) and stmt.name.value in _COLLECTION_HOOKS:
            name = stmt.name.value
        elif isinstance(stmt, cst.SimpleStatementLine):
            for small in stmt.body:
                if isinstance(small, cst.Assign | cst.AugAssign | cst.AnnAssign):
                    targets = ([t.target for t in small.targets] if isinstance(small, cst.Assign)
                               else [small.target])
                    names = [dotted(t) for t in targets]
                    name = next((n for n in names if n in _COLLECTION_NAMES), "")
                elif isinstance(small, cst.Expr) and isinstance(small.value, cst.Call):
                    callee = dotted(small.value.func)
                    if callee.startswith(tuple(f"{n}." for n in _COLLECTION_NAMES)):
                        name = callee
        if name:
            code, _ = parts.get(name, ("", 0))
            parts[name] = (code + module.code_for_node(stmt).strip() + "\n", positions[stmt].start.line)
    return parts


def _conftest(edit: FileEdit) -> Iterator[GuardFinding]:
    old, new = _collection_parts(edit.before), _collection_parts(edit.after)
    for name in sorted(set(old) | set(new)):
        if old.get(name, ("", 0))[0] != new.get(name, ("", 0))[0]:
            line = new[name][1] if name in new else old[name][1]
            how = "changed" if name in old and name in new else ("added" if name in new else "removed")
            yield GuardFinding(rule="GRD006", file=edit.path, line=line, detail=f"conftest.py's {name} is {how}")


_INI_SECTIONS = {"pytest.ini": ("pytest",), "tox.ini": ("pytest",), "setup.cfg": ("tool:pytest",)}


def _section_line(text: str, header: str) -> int | None:
    for i, line in enumerate(text.splitlines(), 1):
        if line.strip() == header:
            return i
    return None


def _config(edit: FileEdit) -> Iterator[GuardFinding]:
    base = PurePosixPath(edit.path).name
    if base == "pyproject.toml":
        def pytest_of(text: str | None) -> object:
            try:
                data = tomllib.loads(text or "")
            except tomllib.TOMLDecodeError:
                return text
            return data.get("tool", {}).get("pytest")
        if pytest_of(edit.before) != pytest_of(edit.after):
            line = _section_line(edit.after or "", "[tool.pytest.ini_options]")
            yield GuardFinding(rule="GRD006", file=edit.path, line=line,
                               detail="pyproject.toml's [tool.pytest] section is changed")
        return
    for section in _INI_SECTIONS.get(base, ()):
        def items(text: str | None, section: str = section) -> dict[str, str] | None:
            parser = configparser.ConfigParser(interpolation=None)
            try:
                parser.read_string(text or "")
            except configparser.Error:
                return {"<unparsable>": text or ""}
            return dict(parser[section]) if parser.has_section(section) else None
        if items(edit.before) != items(edit.after):
            line = _section_line(edit.after or "", f"[{section}]")
            yield GuardFinding(rule="GRD006", file=edit.path, line=line,
                               detail=f"{base}'s [{section}] section is changed")


def _fix008_notes(edit: FileEdit) -> Iterator[GuardNote]:
    old = (edit.before or "").count(MARKER)
    lines = (edit.after or "").splitlines()
    if sum(MARKER in line for line in lines) > old:
        line = next(i for i, text in enumerate(lines, 1) if MARKER in text)
        yield GuardNote(rule="FIX008", file=edit.path, line=line,
                        detail="torch.set_float32_matmul_precision('highest') on tpx only, in a test module: "
                               "the policy's documented exception (the test's own check is unchanged)")


def check_patch(request: GuardRequest) -> GuardResult:
    """The findings of a patch (an empty list: nothing weakens the tests) and the exceptions noted."""
    passed = _passed_names(request.passed_on_reference) if request.passed_on_reference is not None else None
    known = {m for m, _ in passed} if passed is not None else set()
    result = GuardResult()
    for edit in request.files:
        if edit.before == edit.after:
            continue
        base = PurePosixPath(edit.path).name
        if base == "conftest.py":
            result.findings += list(_conftest(edit))
        elif is_test_module(edit.path) or (edit.before is not None and is_test_module(edit.path)):
            result.findings += list(_test_module(edit, passed, known))
            result.notes += list(_fix008_notes(edit))
        elif base in _INI_SECTIONS or base == "pyproject.toml":
            result.findings += list(_config(edit))
    return result
