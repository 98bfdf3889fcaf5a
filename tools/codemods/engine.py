"""Run the rules over one module: one batched traversal per pass, transforms applied in one
transformer, then the device variable and imports. Pure: source text in, results out."""

from __future__ import annotations

import ast
import logging
import re
from dataclasses import dataclass, field

import libcst as cst
from libcst.metadata import CodeRange, ImportAssignment, Scope, ScopeProvider

from tools.codemods import fastvisit
from tools.codemods.base import Category, DeviceMode, Hit, RuleContext, parent_map
from tools.codemods.device import (
    FALLBACK_NAME,
    DeviceInfo,
    find_device_variable,
    insert_definitions,
    insert_device_definition,
    module_binds,
    torch_alias,
    unsafe_scopes,
)
from tools.codemods.fstring_quotes import requote
from tools.codemods.imports import add_needed_imports, remove_unused
from tools.codemods.nodes import code
from tools.codemods.positions import positions_of
from tools.codemods.prefilter import active_rules
from tools.codemods.registry import all_rules

logger = logging.getLogger(__name__)

# every traversal the rules and libcst's metadata analyses make is read-only: walk, do not rebuild
fastvisit.install()

MAX_PASSES = 4

#: a device variable defined elsewhere (an earlier notebook cell): (name, torch alias, holds a device string)
DefinedDevice = tuple[str, str, bool]
#: names imported elsewhere (earlier notebook cells): (bound name, qualified name), later ones win
OuterImports = tuple[tuple[str, str], ...]


@dataclass
class RawFinding:
    rule_id: str
    line: int
    col: int
    end_line: int
    end_col: int
    category: Category
    message: str
    suggestion: str | None
    snippet: str
    blocks: tuple[str, ...]


@dataclass
class ModuleOutcome:
    findings: list[RawFinding]
    new_source: str
    applied: list[str] = field(default_factory=list)
    remaining: list[RawFinding] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    #: the module's device variable after the rewrite, when it has one: (name, torch alias, holds a string)
    device_variable: DefinedDevice | None = None


class _Apply(cst.CSTTransformer):
    """Applies the hits' transforms bottom-up. Only the hit nodes and their ancestors are entered
    (``path``): every other subtree is kept as it is, not rebuilt node by node."""

    def __init__(self, hits: list[Hit], parents: dict[cst.CSTNode, cst.CSTNode]) -> None:
        super().__init__()
        self.by_node: dict[int, list[Hit]] = {}
        self.path: set[int] = set()
        for h in hits:
            self.by_node.setdefault(id(h.node), []).append(h)
            node: cst.CSTNode | None = h.node
            while node is not None and id(node) not in self.path:
                self.path.add(id(node))
                node = parents.get(node)
        self.applied: list[Hit] = []
        self.failed: list[tuple[Hit, str]] = []

    def on_visit(self, node: cst.CSTNode) -> bool:
        return id(node) in self.path

    # libcst types on_leave as returning the node's own type; a rule's transform may replace a node with
    # any other (a call by a name), which libcst accepts where the parent's field does
    def on_leave(self, original_node: cst.CSTNode, updated_node: cst.CSTNode) -> cst.CSTNode:  # type: ignore[override]
        for h in self.by_node.get(id(original_node), ()):
            assert h.transform is not None
            try:
                new = h.transform(updated_node)
            except Exception as exc:  # a rule bug must not lose the whole file
                logger.warning("rule %s could not transform %r: %s", h.rule_id, code(original_node)[:60], exc)
                self.failed.append((h, str(exc)))
                continue
            updated_node = new
            self.applied.append(h)
        return updated_node


_AS_NAME = re.compile(r"\bas\s+([A-Za-z_][A-Za-z0-9_]*)")


def _alias_names(source: str) -> frozenset[str]:
    return frozenset(_AS_NAME.findall(source))


def _one_pass(module: cst.Module, device_mode: DeviceMode, rule_ids: set[str] | None,
              defined_elsewhere: DefinedDevice | None = None, source: str | None = None,
              outer_imports: OuterImports = ()) -> tuple[cst.MetadataWrapper, list[Hit], DeviceInfo]:
    # nodes are immutable and freshly parsed (or parsed from the cache), so no defensive deep copy
    wrapper = cst.MetadataWrapper(module, unsafe_skip_copy=True)
    info = find_device_variable(wrapper.module, device_mode)
    torch_name = torch_alias(wrapper.module)
    if defined_elsewhere is not None:
        if not info.defined and info.definition_value is None:
            info = DeviceInfo(defined_elsewhere[0], defined=True, is_string=defined_elsewhere[2])
        torch_name = torch_name or defined_elsewhere[1]
    outer = dict(outer_imports)
    if torch_name is None and "torch" in outer.values():
        torch_name = "torch" if outer.get("torch") == "torch" else next(n for n, q in outer.items() if q == "torch")
    text = source if source is not None else wrapper.module.code
    info, unsafe, parents = _scope_safe_name(wrapper, info, text)
    ctx = RuleContext(device_mode=device_mode, device_name=info.name,
                      device_definition_value=info.definition_value, torch_name=torch_name,
                      alias_names=_alias_names(wrapper.module.code if source is None else source)
                      | {name for name, q in outer.items() if name != q.rsplit(".", 1)[-1]},
                      module=wrapper.module, parents=parents, outer_imports=outer,
                      device_is_string=info.is_string, device_is_accelerator=info.defined, unsafe_scopes=unsafe)
    info.torch_name = ctx.torch_name
    # per-rule pre-filter: only rules whose trigger words occur in the text can fire; the
    # contextual ones run only once another rule has found something
    # a name an earlier notebook cell imports (``from torch import cuda as tc``) triggers as what it means
    used = [q for name, q in outer.items() if re.search(rf"\b{re.escape(name)}\b", text)]
    active = active_rules("\n".join([text, *used]) if used else text)
    first = [cls(ctx) for cls in all_rules()
             if not cls.CONTEXTUAL and cls.ID in active and (rule_ids is None or cls.ID in rule_ids)]
    ctx.running_rules = frozenset(rule.ID for rule in first)
    if first:
        wrapper.visit_batched(first)
    if ctx.hits:
        second = [cls(ctx) for cls in all_rules() if cls.CONTEXTUAL and (rule_ids is None or cls.ID in rule_ids)]
        if second:
            wrapper.visit_batched(second)
    hits = ctx.hits
    # one finding per (rule, node)
    seen: set[tuple[str, int]] = set()
    unique = []
    for h in hits:
        key = (h.rule_id, id(h.node))
        if key not in seen:
            seen.add(key)
            unique.append(h)
    info.definition_used = ctx.definition_used
    return wrapper, unique, info


def _scope_safe_name(wrapper: cst.MetadataWrapper, info: DeviceInfo, text: str
                     ) -> tuple[DeviceInfo, frozenset[Scope], dict[cst.CSTNode, cst.CSTNode] | None]:
    """The device variable under a name no function rebinds (libcst scope analysis), and the scopes
    where its name still means a local binding. A variable Ferry inserts moves to ``ferry_device``
    when a function binds ``device`` itself (a parameter, ``device = x.device``); a user's variable
    keeps its name, and the rules leave the sites in those scopes for review. Also returns the parent
    map it built (None when the cheap pre-check made the analysis unnecessary)."""
    if not _could_shadow(wrapper.module, text, info.name):
        return info, frozenset(), None
    scopes = wrapper.resolve(ScopeProvider)
    parents = parent_map(wrapper.module)
    unsafe = unsafe_scopes(scopes, parents, info.name)
    if unsafe and not info.defined and info.definition_value is None and info.name != FALLBACK_NAME \
            and not module_binds(wrapper.module, FALLBACK_NAME):
        other = (unsafe_scopes(scopes, parents, FALLBACK_NAME) if _could_shadow(wrapper.module, text, FALLBACK_NAME)
                 else frozenset())
        if not other:
            return DeviceInfo(FALLBACK_NAME, torch_name=info.torch_name), frozenset(), parents
    return info, unsafe, parents


def _could_shadow(module: cst.Module, text: str, name: str) -> bool:
    """Cheap pre-check before the scope analysis: the name is spelled at all, and the module has a
    compound statement (a function, class or block that could hold a lambda/comprehension binding it)."""
    return (re.search(rf"\b{re.escape(name)}\b", text) is not None
            and any(not isinstance(stmt, cst.SimpleStatementLine) for stmt in module.body))


_last_positions: tuple[cst.MetadataWrapper | None, dict[cst.CSTNode, CodeRange]] = (None, {})


def _positions(wrapper: cst.MetadataWrapper, nodes: list[cst.CSTNode]) -> dict[cst.CSTNode, CodeRange]:
    """Positions of the hit nodes (as libcst's PositionProvider gives them), computed for the hits alone and
    kept for the last module asked about (its findings, the lines filter and the rewrite's warnings ask
    about the same hits)."""
    global _last_positions
    owner, known = _last_positions
    if owner is not wrapper:
        known = {}
    missing = [n for n in nodes if n not in known]
    if missing:
        known = {**known, **positions_of(wrapper.module, missing)}
        _last_positions = (wrapper, known)
    return known


def _findings(wrapper: cst.MetadataWrapper, hits: list[Hit], lines: list[str], sort: bool = True) -> list[RawFinding]:
    if not hits:
        return []
    positions = _positions(wrapper, [h.node for h in hits])
    out = []
    for h in hits:
        pos = positions[h.node]
        first = lines[pos.start.line - 1] if 0 < pos.start.line <= len(lines) else ""
        out.append(RawFinding(h.rule_id, pos.start.line, pos.start.column + 1, pos.end.line,
                              pos.end.column + 1, h.category, h.message, h.suggestion,
                              first.strip(), h.blocks))
    if sort:
        out.sort(key=lambda f: (f.line, f.col, f.rule_id))
    return out


def _imports_of(wrapper: cst.MetadataWrapper, hits: list[Hit]) -> list[cst.Import | cst.ImportFrom]:
    """Import statements that bind a name used inside the rewritten nodes."""
    scopes = wrapper.resolve(ScopeProvider)
    found: dict[int, cst.Import | cst.ImportFrom] = {}

    class _Names(cst.CSTVisitor):
        def visit_Name(self, node: cst.Name) -> None:
            scope = scopes.get(node)
            if scope is None or node.value not in scope:
                return
            for assignment in scope[node.value]:
                if isinstance(assignment, ImportAssignment):
                    imp = assignment.node  # an ImportAssignment's node is its import statement
                    if not isinstance(imp, (cst.Import, cst.ImportFrom)):
                        continue
                    if isinstance(imp, cst.ImportFrom) and (imp.relative or isinstance(imp.names, cst.ImportStar)):
                        continue  # relative imports cannot be resolved to a module; leave them alone
                    found[id(imp)] = imp

    for h in hits:
        h.node.visit(_Names())
    return list(found.values())


def analyze(source: str, *, device_mode: DeviceMode = "accelerator", rule_ids: set[str] | None = None,
            lines: set[int] | None = None, rewrite: bool = True,
            module: cst.Module | None = None, fixed_point: bool = False,
            device_defined_as: DefinedDevice | None = None, outer_imports: OuterImports = ()) -> ModuleOutcome:
    """Find idioms in ``source``; when ``rewrite``, apply the auto rules (to ``lines`` only if given).

    Transforms compose (each one rewrites the already-updated node), so one pass applies every
    auto rule; ``remaining`` then lists the findings that were not applied, with positions in
    the ORIGINAL source (as ``ferry scan`` reports them). ``fixed_point=True`` re-runs the rules
    on the output until nothing changes and reports ``remaining`` against the rewritten text
    (slower; the golden tests check that a second run changes nothing). ``device_defined_as``
    names a device variable defined elsewhere (an earlier notebook cell), to use instead of
    inserting a definition; ``outer_imports`` the names imported there, which the module's own
    unbound names then mean.

    Raises ``libcst.ParserSyntaxError`` when the source does not parse.
    """
    module = module if module is not None else cst.parse_module(source)
    wrapper, hits, info = _one_pass(module, device_mode, rule_ids, device_defined_as, source, outer_imports)
    findings = _findings(wrapper, hits, source.splitlines())
    if not rewrite:
        return ModuleOutcome(findings=findings, new_source=source, remaining=findings)
    applied: list[str] = []
    warnings: list[str] = []
    current, current_hits, current_info = wrapper, hits, info
    new_source = source
    remaining = findings
    inserted = False
    for _ in range(MAX_PASSES if fixed_point and lines is None else 1):
        positions = _positions(current, [h.node for h in current_hits])
        todo = [h for h in current_hits if h.transform is not None
                and (lines is None or positions[h.node].start.line in lines)]
        if not todo:
            break
        step = _apply_once(current, todo, current_info, device_mode)
        warnings.extend(step.warnings)
        if not step.applied:
            break
        try:
            step.source = _parsable(step.source)
        except SyntaxError as exc:  # never hand back code that does not parse
            warnings.append(f"rewrite produced invalid code ({exc.msg}, line {exc.lineno}); file left unchanged")
            logger.error("rewrite produced invalid code:\n%s", step.source)
            return ModuleOutcome(findings=findings, new_source=source, remaining=findings, warnings=warnings)
        applied.extend(step.applied)
        inserted = inserted or step.inserted_device
        applied_ids = {id(h.node) for h in step.applied_hits}
        # _findings gives one finding per hit, in the hits' order (unsorted)
        remaining = [f for f, h in zip(_findings(current, current_hits, new_source.splitlines(), sort=False),
                                       current_hits, strict=True)
                     if id(h.node) not in applied_ids]
        remaining.sort(key=lambda f: (f.line, f.col, f.rule_id))
        new_source = step.source
        if not fixed_point or lines is not None:
            break
        current, current_hits, current_info = _one_pass(cst.parse_module(new_source), device_mode, rule_ids,
                                                        device_defined_as, new_source, outer_imports)
        remaining = _findings(current, current_hits, new_source.splitlines())
    has_device = (info.defined and device_defined_as is None) or info.definition_used or inserted
    return ModuleOutcome(findings=findings, new_source=new_source, applied=sorted(set(applied)),
                         remaining=remaining, warnings=warnings,
                         device_variable=((info.name, info.torch_name or "torch", info.is_string) if has_device
                                          else None))


@dataclass
class _Step:
    source: str
    applied: list[str]
    applied_hits: list[Hit]
    warnings: list[str]
    inserted_device: bool = False


def _parsable(source: str) -> str:
    """``source`` when it parses; else, where that is all that is wrong, the same code with the string
    literals in its f-strings' fields quoted apart from their f-string (a rule's ``"cpu"`` written into
    ``f"{...}"``, which only Python 3.12 reads). SyntaxError when it still does not parse."""
    try:
        ast.parse(source)
    except SyntaxError:
        try:
            requoted = requote(cst.parse_module(source)).code
        except cst.ParserSyntaxError:
            raise SyntaxError("the rewritten code does not parse") from None
        ast.parse(requoted)  # still not parsing: its SyntaxError goes up
        return requoted
    return source


def _apply_once(current: cst.MetadataWrapper, todo: list[Hit], info: DeviceInfo, device_mode: DeviceMode) -> _Step:
    positions = _positions(current, [h.node for h in todo])
    candidates = _imports_of(current, todo)
    applier = _Apply(todo, parent_map(current.module))
    new_module = current.module.visit(applier)
    warnings = [f"{h.rule_id}: left unchanged at line {positions[h.node].start.line}: {why}"
                for h, why in applier.failed]
    if not applier.applied:
        return _Step(current.module.code, [], [], warnings)
    needs_device = any(h.needs_device for h in applier.applied)
    needed: list[tuple[str, str | None]] = []  # imports the rewritten code uses
    alias = info.torch_name
    inserted = needs_device and not info.defined and not info.definition_used
    if inserted:
        new_module = insert_device_definition(new_module, info.name, device_mode, alias or "torch")
    definitions = dict(d for h in applier.applied for d in h.add_definitions)
    if definitions:
        new_module = insert_definitions(new_module, definitions, after=1 if inserted else 0)
    for h in applier.applied:
        for mod, obj in h.add_imports:
            if not (mod == "torch" and obj is None and alias is not None):
                needed.append((mod, obj))
    if needs_device and alias is None:
        needed.append(("torch", None))
    new_module = remove_unused(new_module, candidates)
    if needed:
        new_module = add_needed_imports(new_module, needed)
    return _Step(new_module.code, [h.rule_id for h in applier.applied], applier.applied, warnings, inserted)
