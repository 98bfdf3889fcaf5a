"""The rule base class and the data a rule produces.

Every rule is a libcst ``BatchableCSTVisitor``: all rules run in ONE traversal of a module
(``MetadataWrapper.visit_batched``), resolving qualified names through libcst's scope analysis so that
``import torch as T``, ``from torch import cuda`` and ``import torch.cuda.amp as amp`` all
resolve to the same ``torch.cuda...`` names. A rule never prints and never touches files: it
records :class:`Hit` objects (a finding, optionally with a transform for the node) on its
:class:`RuleContext`.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Collection
from dataclasses import dataclass, field
from typing import ClassVar, Literal

import libcst as cst
from libcst.metadata import ClassScope, GlobalScope, Scope, ScopeProvider

from tools.codemods.nodes import cuda_device_string, dotted, expr
from tools.codemods.targets import DeviceMode as DeviceMode  # re-exported for the rules
from tools.codemods.targets import device_expression, device_string_expression

_VISITOR_NAMES: dict[type, tuple[str, ...]] = {}
_LAST_COMPONENTS: dict[int, tuple[Collection[str], frozenset[str]]] = {}


def _last_components(names: Collection[str]) -> frozenset[str]:
    """Last dotted components of a (module-level, long-lived) name table, cached by identity."""
    entry = _LAST_COMPONENTS.get(id(names))
    if entry is None or entry[0] is not names:
        if len(_LAST_COMPONENTS) > 4096:  # tables are module constants; this only guards misuse
            _LAST_COMPONENTS.clear()
        entry = (names, frozenset(n.rsplit(".", 1)[-1] for n in names))
        _LAST_COMPONENTS[id(names)] = entry
    return entry[1]
_TORCH_RE = re.compile(r"(?<![\w.])torch\.")

#: parents in which any expression can stand without parentheses (a whole value, argument, statement)
_LOOSE_PARENTS: tuple[type[cst.CSTNode], ...] = (
    cst.Assign, cst.AnnAssign, cst.AugAssign, cst.Arg, cst.Param, cst.Return, cst.Expr, cst.If, cst.While,
    cst.Assert, cst.Element, cst.DictElement, cst.FormattedStringExpression)
LOOSE_PARENTS = _LOOSE_PARENTS  # for rules that build their own replacement expressions
#: parents that also take a comparison unparenthesised (``a != b and c``, ``not a != b``, ``x if a != b else y``)
_COMPARISON_PARENTS: tuple[type[cst.CSTNode], ...] = (*_LOOSE_PARENTS, cst.BooleanOperation, cst.IfExp)

Category = Literal["auto", "review", "unsupported"]
Transform = Callable[[cst.CSTNode], cst.CSTNode]

#: target devices a CUDA idiom blocks when left in place.
ALL_TARGETS: tuple[str, ...] = ("tpx", "cpu")


@dataclass
class Hit:
    """One idiom found at one node; ``transform`` rewrites the node when the rule is auto."""

    rule_id: str
    node: cst.CSTNode
    category: Category
    message: str
    suggestion: str | None = None
    transform: Transform | None = None
    blocks: tuple[str, ...] = ALL_TARGETS
    needs_device: bool = False
    add_imports: tuple[tuple[str, str | None], ...] = ()
    remove_imports: tuple[tuple[str, str | None, str | None], ...] = ()
    #: module-level definitions the rewrite needs, (name, source): inserted once after the imports
    #: (and the device variable) unless the module binds the name already
    add_definitions: tuple[tuple[str, str], ...] = ()


@dataclass
class RuleContext:
    """Per-module state shared by all rules of one pass."""

    device_mode: DeviceMode = "accelerator"
    device_name: str = "device"
    hits: list[Hit] = field(default_factory=list)
    #: module-level Assign nodes that will become the device variable definition
    device_definitions: list[cst.CSTNode] = field(default_factory=list)
    #: value of an existing module-level ``NAME = <cuda device>`` that becomes the definition
    device_definition_value: cst.CSTNode | None = None
    definition_used: bool = False
    #: every identifier that follows ``as`` in the source (a superset of import aliases)
    alias_names: frozenset[str] = frozenset()
    #: qualified names per node id, shared by all rules of one pass
    qname_cache: dict[int, set[str]] = field(default_factory=dict)
    #: the name ``torch`` is bound to at module level (``import torch as T`` -> "T"); None if not imported
    torch_name: str | None = None
    #: the module being visited (the parent map is built from it on first use)
    module: cst.Module | None = None
    #: the device variable holds a device string (``device = 'cuda'`` kept a string), not a torch.device
    device_is_string: bool = False
    #: the device variable is already Ferry's accelerator definition (a migrated module): a comparison of its
    #: type with "cuda" asks whether the accelerator is CUDA (a CUDA-only feature), it assumes nothing
    device_is_accelerator: bool = False
    #: function/class/comprehension scopes that bind ``device_name`` to something else (a parameter,
    #: ``device = x.device``): naming the module's device variable there would mean the local one
    unsafe_scopes: frozenset[Scope] = frozenset()
    #: ids of the rules running in this pass (a rule leaves a site to another only when that one runs)
    running_rules: frozenset[str] = frozenset()
    #: integer-bound names of ``module`` (tools.codemods.device_indices), computed on first use
    int_names: tuple[frozenset[str], frozenset[str], frozenset[str], frozenset[str]] | None = None
    nccl_names: frozenset[str] | None = None  # names bound to "nccl" (FRY032), computed once per module
    #: child -> parent for every node of ``module``; built lazily by ``parent_of``
    parents: dict[cst.CSTNode, cst.CSTNode] | None = None
    #: names imported outside the module (earlier notebook cells): bound name -> qualified name
    outer_imports: dict[str, str] = field(default_factory=dict)

    def parent_of(self, node: cst.CSTNode) -> cst.CSTNode | None:
        if self.parents is None:
            self.parents = parent_map(self.module) if self.module is not None else {}
        return self.parents.get(node)


class _ParentRecorder(cst.CSTVisitor):
    """One plain traversal with a stack (libcst's ParentNodeProvider walks every node's children
    a second time and ran on every file; most files never ask for a parent)."""

    def __init__(self) -> None:
        self.parents: dict[cst.CSTNode, cst.CSTNode] = {}
        self.stack: list[cst.CSTNode] = []

    def on_visit(self, node: cst.CSTNode) -> bool:
        if self.stack:
            self.parents[node] = self.stack[-1]
        self.stack.append(node)
        return True

    def on_leave(self, original_node: cst.CSTNode) -> None:
        self.stack.pop()


def parent_map(module: cst.Module) -> dict[cst.CSTNode, cst.CSTNode]:
    recorder = _ParentRecorder()
    module.visit(recorder)
    return recorder.parents


class CodemodRule(cst.BatchableCSTVisitor):
    """Base class: subclasses set the class attributes and implement ``visit_*`` methods."""

    ID: ClassVar[str] = ""
    NAME: ClassVar[str] = ""
    DESCRIPTION: ClassVar[str] = ""
    CATEGORY: ClassVar[Category] = "review"
    ENTRIES: ClassVar[tuple[int, ...]] = ()
    #: contextual rules only report in modules that have non-contextual findings too
    CONTEXTUAL: ClassVar[bool] = False
    #: dtypes the rule's rewrites change (original -> new, e.g. ("float64", "float32")): parity compares
    #: such tensors at the new dtype's tier (tools.parity CompareOptions.dtype_changes)
    DTYPE_CHANGES: ClassVar[tuple[tuple[str, str], ...]] = ()
    # Only scopes are computed up front: qualified names are asked of the scope for the few nodes
    # whose spelling could match (QualifiedNameProvider would compute them for every node), parents
    # come from a lazily built map, positions are resolved by the engine only for files with findings.
    METADATA_DEPENDENCIES: ClassVar[tuple[type[cst.BaseMetadataProvider[object]], ...]] = (ScopeProvider,)

    def __init__(self, ctx: RuleContext) -> None:
        super().__init__()
        self.ctx = ctx

    def get_visitors(self):  # type: ignore[no-untyped-def]
        """Same as libcst's, but the method names are looked up once per class, not per file
        (libcst's ``inspect.getmembers`` per visitor per module dominated small files)."""
        cls = type(self)
        names = _VISITOR_NAMES.get(cls)
        if names is None:
            names = tuple(
                n for n in dir(cls)
                if n.startswith(("visit_", "leave_")) and callable(getattr(cls, n))
                and not getattr(getattr(cls, n), "_is_no_op", False))
            _VISITOR_NAMES[cls] = names
        return {n: getattr(self, n) for n in names}

    # -- helpers -------------------------------------------------------------------------
    def qnames(self, node: cst.CSTNode) -> set[str]:
        cache = self.ctx.qname_cache
        key = id(node)
        found = cache.get(key)
        if found is None:
            scope = self.get_metadata(ScopeProvider, node, None)
            found = {q.name for q in scope.get_qualified_names_for(node)} if scope is not None else set()
            if not found and scope is not None and self.ctx.outer_imports:
                found = self._outer_qname(node, scope)
            cache[key] = found
        return found

    def _outer_qname(self, node: cst.CSTNode, scope: Scope) -> set[str]:
        """``torch.cuda.synchronize`` in a notebook cell whose ``torch`` an earlier cell imported:
        the name is not bound anywhere in this cell, so the earlier import is what it means."""
        text = dotted(node)
        if text is None:
            return set()
        head, _, rest = text.partition(".")
        target = self.ctx.outer_imports.get(head)
        if target is None or head in scope:
            return set()
        return {f"{target}.{rest}" if rest else target}

    def qname_in(self, node: cst.CSTNode, names: Collection[str]) -> str | None:
        """The qualified name of ``node`` that is in ``names``, if any.

        Fast path: a qualified name ends with the identifier spelled at the node, so when that
        identifier is not the last component of any of ``names`` no metadata is looked up.
        """
        if isinstance(node, cst.Name):
            last = node.value
            if last in self.ctx.alias_names:  # `from m import x as last`: the real name is elsewhere
                return self._lookup(node, names)
        elif isinstance(node, cst.Attribute):
            last = node.attr.value
        else:
            return None
        if last not in _last_components(names):
            return None
        return self._lookup(node, names)

    def _lookup(self, node: cst.CSTNode, names: Collection[str]) -> str | None:
        for name in self.qnames(node):
            if name in names:
                return name
        return None

    def parent(self, node: cst.CSTNode) -> cst.CSTNode | None:
        return self.ctx.parent_of(node)

    def is_outermost_attribute(self, node: cst.CSTNode) -> bool:
        parent = self.parent(node)
        return not (isinstance(parent, cst.Attribute) and parent.value is node)

    def hit(self, node: cst.CSTNode, message: str, *, category: Category | None = None,
            suggestion: str | None = None, transform: Transform | None = None,
            needs_device: bool = False, blocks: tuple[str, ...] = ALL_TARGETS,
            add_imports: tuple[tuple[str, str | None], ...] = (),
            remove_imports: tuple[tuple[str, str | None, str | None], ...] = (),
            add_definitions: tuple[tuple[str, str], ...] = ()) -> None:
        cat = category or (self.CATEGORY if transform is not None or self.CATEGORY != "auto" else "review")
        if transform is None and cat == "auto":
            cat = "review"
        if cat == "auto" and needs_device and self.in_unsafe_scope(node):
            cat = "review"
            message = (f"{message}; left for review: `{self.dev}` is also bound here (a parameter or local "
                       f"assignment), so the module's device variable cannot be named in this function")
        self.ctx.hits.append(Hit(self.ID, node, cat, message, suggestion,
                                 transform if cat == "auto" else None, blocks, needs_device,
                                 add_imports, remove_imports, add_definitions))

    def torch_text(self, text: str) -> str:
        """Rewrites ``torch.`` in generated code to the module's own alias for torch."""
        alias = self.ctx.torch_name or "torch"
        return text if alias == "torch" else _TORCH_RE.sub(alias + ".", text)

    def in_unsafe_scope(self, node: cst.CSTNode) -> bool:
        """Whether ``node`` sits where ``device_name`` means a local binding of the user's (a parameter,
        ``device = x.device``) rather than the module's device variable (libcst's scope analysis)."""
        if not self.ctx.unsafe_scopes:
            return False
        scope = self.get_metadata(ScopeProvider, node, None)
        own = True
        while scope is not None and not isinstance(scope, GlobalScope):
            # a class body's names are not visible in the functions defined inside it
            if (own or not isinstance(scope, ClassScope)) and scope in self.ctx.unsafe_scopes:
                return True
            own = False
            scope = scope.parent
        return False

    @property
    def dev(self) -> str:
        return self.ctx.device_name

    def device_ref(self, node: cst.CSTNode) -> str:
        """Text that stands for the target device at ``node``: the module's device variable,
        or the device expression itself where ``node`` defines (or shadows) that variable."""
        if node is self.ctx.device_definition_value:
            self.ctx.definition_used = True
            return self.torch_text(device_expression(self.ctx.device_mode))
        parent = self.parent(node)
        if isinstance(parent, (cst.Assign, cst.AnnAssign)):
            targets = ([t.target for t in parent.targets] if isinstance(parent, cst.Assign)
                       else [parent.target])
            if any(isinstance(t, cst.Name) and t.value == self.dev for t in targets):
                return self.torch_text(device_expression(self.ctx.device_mode))
        return self.dev

    def device_type(self, node: cst.CSTNode) -> str:
        ref = self.device_ref(node)
        if ref == self.dev and self.ctx.device_is_string:
            return self.torch_text(f"torch.device({ref}).type")  # "tpx:0" or "cpu" alike
        return f"{ref}.type" if ref == self.dev else f"({ref}).type"

    def device_string(self, node: cst.CSTNode, ordinal: int | None = None) -> str:
        """Text of a *string* naming the target device, for a device string literal at ``node`` (catalogue entries
        53: a string stays a string): the accelerator's type name, with the index the original gave."""
        if node is self.ctx.device_definition_value:
            self.ctx.definition_used = True
        return self.torch_text(device_string_expression(self.ctx.device_mode, ordinal))

    def string_device_hit(self, node: cst.CSTNode, message: str, ordinal: int | None = None) -> None:
        """An auto rewrite of a device string at ``node`` to :meth:`device_string` (parentheses kept)."""
        self.replace_expression(node, message, self.device_string(node, ordinal))

    def replace_expression(self, node: cst.CSTNode, message: str, text: str) -> None:
        """An auto rewrite of ``node`` to the expression ``text``: its own parentheses are kept, and new ones
        added where the parent would bind part of it otherwise (``A if c else "cpu"`` inside another
        conditional, ``a != b`` inside a comparison)."""
        new = expr(text)
        parent = self.parent(node)
        loose = _COMPARISON_PARENTS if isinstance(new, cst.Comparison) else _LOOSE_PARENTS
        wrap = (isinstance(new, (cst.IfExp, cst.Comparison, cst.BinaryOperation, cst.BooleanOperation))
                and not isinstance(parent, loose) and not getattr(node, "lpar", ()))
        if isinstance(parent, cst.UnaryOperation) and isinstance(parent.operator, cst.Not) \
                and isinstance(new, cst.Comparison):
            wrap = False
        shown = f"({text})" if wrap else text
        imports: tuple[tuple[str, str | None], ...] = (("torch", None),) if "torch" in text else ()

        def transform(updated: cst.CSTNode) -> cst.CSTNode:
            if wrap:
                return new.with_changes(lpar=[cst.LeftParen()], rpar=[cst.RightParen()])
            return new.with_changes(lpar=getattr(updated, "lpar", ()), rpar=getattr(updated, "rpar", ()))

        self.hit(node, message, category="auto", suggestion=shown, add_imports=imports, transform=transform)

    def cuda_device_type_arg(self, node: cst.CSTNode, arg: cst.Arg | None, message: str) -> None:
        """Where ``arg`` (the device-type argument of ``node``) is a "cuda"/"cuda:N" literal, an auto
        rewrite of it to the target device's type (``device.type``)."""
        if arg is None or not cuda_device_string(arg.value)[0]:
            return
        dtype = self.device_type(node)
        self.hit(arg.value, message, category="auto", suggestion=dtype,
                 transform=lambda updated: expr(dtype), needs_device=True)
