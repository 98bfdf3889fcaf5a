"""FRY019 (streams.event): torch.cuda.Event(...) -> device-generic events or host timing.

``--device tpx``: ``torch.Event(device=device, ...)``.

Device-generic (``--device accelerator``), checked against torch 2.13: ``torch.Event(device="cpu")``
can be built but ``record()`` raises "cpu backend doesn't support events", and ``torch.cpu.Event``
(what ``torch.get_device_module("cpu").Event`` is) takes no arguments and has no ``elapsed_time``.
So:

* ``torch.cuda.Event()`` without arguments -> ``torch.get_device_module(device).Event()``: the device's
  event class (a no-op on CPU, which is synchronous), with the same ``record``/``synchronize``/
  ``wait``/``query``.
* timing pairs ``s = torch.cuda.Event(enable_timing=True)`` (or created together, ``s, e = torch.cuda.Event(
  enable_timing=True), torch.cuda.Event(enable_timing=True)``: catalogue 62; or a list of them built by a
  comprehension, each element ``evs[i]`` used as below) used only as ``s.record()`` statements,
  ``s.synchronize()`` and ``s.elapsed_time(e)`` between two such events -> host timing:
  ``s = time.perf_counter()`` at creation, each ``s.record()`` becomes
  ``torch.get_device_module(device).synchronize()`` + ``s = time.perf_counter()``, ``s.synchronize()``
  the device synchronize, ``s.elapsed_time(e)`` ``(e - s) * 1000`` (milliseconds, as before).
* anything else (other arguments, events stored in attributes or containers, passed to functions,
  ``record(stream)``, ``time`` bound to something other than the module) stays review with the reason.
"""

from __future__ import annotations

from functools import partial

import libcst as cst
from libcst.metadata import Assignment, ImportAssignment, ScopeProvider

from tools.codemods.base import RuleContext, Transform
from tools.codemods.generic import CallMapRule
from tools.codemods.nodes import bool_value, code, expr
from tools.codemods.tables import EVENT_CALLS

_NO_CPU_EVENTS = ("CPU has no timing events (torch.Event(device='cpu').record() raises, torch.cpu.Event has no "
                  "enable_timing/elapsed_time)")
_TIMING_SUGGESTION = ("time.perf_counter() around torch.get_device_module(device).synchronize(), "
                      "or torch.Event(device=device, enable_timing=True) where the device has events")
_NEEDS_PARENS = (cst.BinaryOperation, cst.UnaryOperation, cst.Attribute, cst.Subscript, cst.Call)


class _Unsafe(Exception):
    pass


class Events(CallMapRule):
    ID = "FRY019"
    NAME = "streams.event"
    DESCRIPTION = ("torch.cuda.Event(...) -> torch.Event(device=device, ...) with --device tpx; device-generic: "
                   "Event() -> torch.get_device_module(device).Event(), timing pairs (enable_timing=True used only "
                   "for record/synchronize/elapsed_time) -> time.perf_counter() after a device synchronize "
                   "(CPU has no timing events); other uses -> review.")
    CATEGORY = "auto"
    ENTRIES = (19, 62)
    CALLS = EVENT_CALLS
    METADATA_DEPENDENCIES = (ScopeProvider,)

    def __init__(self, ctx: RuleContext) -> None:
        super().__init__(ctx)
        self._safe: dict[int, bool] = {}

    def visit_Call(self, node: cst.Call) -> None:
        name = self.qname_in(node.func, self.CALLS)
        if name is None:
            return
        if self.ctx.device_mode != "accelerator":
            super().visit_Call(node)
            return
        if not node.args:
            target = self.torch_text(f"torch.get_device_module({self.device_ref(node)}).Event")
            self.hit(node, f"{name} is CUDA-only; the device module's Event works on every device (a no-op on CPU)",
                     category="auto", suggestion=f"{target}()", needs_device=True,
                     transform=lambda updated: updated.with_changes(func=expr(target)), add_imports=(("torch", None),))
            return
        if not self._timing_call(node):
            self.hit(node, f"{name}(...): only Event() and Event(enable_timing=True) have a device-generic form; "
                           f"{_NO_CPU_EVENTS}", category="review", suggestion=_TIMING_SUGGESTION)
            return
        try:
            assignment = self._creation(node)
            sites = self._sites(assignment, set())
        except _Unsafe as why:
            self.hit(node, f"{name}(enable_timing=True): {_NO_CPU_EVENTS}, and this event cannot be turned into "
                           f"host timing safely: {why}", category="review", suggestion=_TIMING_SUGGESTION)
            return
        self._rewrite_pair(node, assignment, sites)

    # -- analysis ------------------------------------------------------------------------
    @staticmethod
    def _timing_call(node: cst.Call) -> bool:
        return (len(node.args) == 1 and node.args[0].keyword is not None
                and node.args[0].keyword.value == "enable_timing" and bool_value(node.args[0].value) is True)

    def _creation(self, node: cst.Call) -> Assignment:
        holder = self.parent(node)
        # a list of timing events, ``evs = [torch.cuda.Event(enable_timing=True) for _ in range(n)]``, used as
        # ``evs[i].record()`` and so on: each element is timed like a single event
        target = self._target_name(holder if isinstance(holder, cst.ListComp) and holder.elt is node else node)
        if target is None:
            raise _Unsafe("it is not assigned to a plain variable")
        scope = self.get_metadata(ScopeProvider, target, None)
        if scope is None:
            raise _Unsafe("its scope is unknown")
        bound = [a for a in scope.assignments[target.value]]
        if len(bound) != 1 or not isinstance(bound[0], Assignment) or bound[0].node is not target:
            raise _Unsafe(f"`{target.value}` is assigned more than once")
        self._check_time_name(target)
        return bound[0]

    def _target_name(self, value: cst.CSTNode) -> cst.Name | None:
        """The variable ``value`` is assigned to: ``s = value``, or its own position in a tuple assignment
        ``s, e = value, other`` (catalogue 62; both sides plain tuples of the same length, no starred)."""
        parent = self.parent(value)
        if isinstance(parent, cst.Assign) and parent.value is value:
            if len(parent.targets) == 1 and isinstance(parent.targets[0].target, cst.Name):
                return parent.targets[0].target
            return None
        if not isinstance(parent, cst.Element) or isinstance(parent, cst.StarredElement):
            return None
        values = self.parent(parent)
        assign = self.parent(values) if isinstance(values, cst.Tuple) else None
        if not (isinstance(values, cst.Tuple) and isinstance(assign, cst.Assign) and assign.value is values
                and len(assign.targets) == 1 and isinstance(assign.targets[0].target, (cst.Tuple, cst.List))):
            return None
        targets = assign.targets[0].target.elements
        if len(targets) != len(values.elements) or any(isinstance(e, cst.StarredElement) for e in targets):
            return None
        target = targets[list(values.elements).index(parent)].value
        return target if isinstance(target, cst.Name) else None

    def _check_time_name(self, node: cst.CSTNode) -> None:
        scope = self.get_metadata(ScopeProvider, node, None)
        if scope is None or "time" not in scope:
            return
        for a in scope["time"]:
            ok = isinstance(a, ImportAssignment) and isinstance(a.node, cst.Import) and any(
                alias.asname is None and isinstance(alias.name, cst.Name) and alias.name.value == "time"
                for alias in a.node.names)
            if not ok:
                raise _Unsafe("the name `time` is bound to something other than the time module here")

    def _is_list(self, assignment: Assignment) -> bool:
        return isinstance(self._assigned_value(assignment.node), cst.ListComp)

    def _sites(self, assignment: Assignment, seen: set[int]) -> list[tuple[str, cst.CSTNode, object, str]]:
        """(kind, node, extra, the event's text) for every use of the event (of an element, for a list of
        events); raises _Unsafe for any other use."""
        seen.add(id(assignment))
        listed = self._is_list(assignment)
        sites: list[tuple[str, cst.CSTNode, object, str]] = []
        for ref in assignment.references:
            use: cst.CSTNode = ref.node
            if listed:
                element = self.parent(use)
                if not (isinstance(element, cst.Subscript) and element.value is use):
                    raise _Unsafe(f"`{assignment.name}` (a list of events) is used other than as "
                                  f"`{assignment.name}[i]`")
                use = element
            name = code(use) if listed else assignment.name
            parent = self.parent(use)
            if isinstance(parent, cst.Attribute) and parent.value is use:
                call = self.parent(parent)
                method = parent.attr.value
                if not (isinstance(call, cst.Call) and call.func is parent):
                    raise _Unsafe(f"`{name}.{method}` is used without calling it")
                if method == "record" and not call.args:
                    if not listed and self.get_metadata(ScopeProvider, use, None) is not assignment.scope:
                        raise _Unsafe(f"`{name}.record()` is in another function than `{name}` (the new "
                                      "assignment would bind a local name there)")
                    sites.append(("record", self._record_line(call, name), None, name))
                elif method == "synchronize" and not call.args:
                    sites.append(("sync", call, None, name))
                elif method == "elapsed_time" and len(call.args) == 1 and call.args[0].keyword is None:
                    sites.append(("elapsed", call, self._partner(call.args[0].value, seen), name))
                else:
                    raise _Unsafe(f"`{name}.{method}(...)` has no host-timing equivalent")
                self._check_time_name(use)
                continue
            if isinstance(parent, cst.Arg):
                call = self.parent(parent)
                func = call.func if isinstance(call, cst.Call) else None
                if (isinstance(func, cst.Attribute) and func.attr.value == "elapsed_time"
                        and isinstance(func.value, (cst.Name, cst.Subscript))):
                    self._partner(func.value, seen)  # the receiver side rewrites the call
                    continue
            raise _Unsafe(f"`{name}` is used as a value (stored, passed or compared), not only timed")
        return sites

    def _record_line(self, call: cst.Call, name: str) -> cst.SimpleStatementLine:
        stmt = self.parent(call)
        line = self.parent(stmt) if isinstance(stmt, cst.Expr) and stmt.value is call else None
        if not (isinstance(line, cst.SimpleStatementLine) and len(line.body) == 1):
            raise _Unsafe(f"`{name}.record()` is not a statement on its own line")
        return line

    def _partner(self, node: cst.CSTNode, seen: set[int]) -> str:
        """The text of the other event of an elapsed_time call: a timing event variable, or ``evs[i]`` of a
        list of them."""
        if isinstance(node, cst.Subscript) and isinstance(node.value, cst.Name):
            scope = self.get_metadata(ScopeProvider, node.value, None)
            bound = list(scope[node.value.value]) if scope is not None and node.value.value in scope else []
            value = (self._assigned_value(bound[0].node) if len(bound) == 1 and isinstance(bound[0], Assignment)
                     else None)
            if not (isinstance(value, cst.ListComp) and isinstance(value.elt, cst.Call)
                    and self.qname_in(value.elt.func, self.CALLS) and self._timing_call(value.elt)):
                raise _Unsafe(f"`{node.value.value}` is not a list of torch.cuda.Event(enable_timing=True)")
            if id(bound[0]) not in seen:
                self._sites(bound[0], seen)  # type: ignore[arg-type]
            return code(node)
        if not isinstance(node, cst.Name):
            raise _Unsafe("elapsed_time() is given something other than an event variable")
        scope = self.get_metadata(ScopeProvider, node, None)
        bound = list(scope[node.value]) if scope is not None and node.value in scope else []
        if len(bound) != 1 or not isinstance(bound[0], Assignment) or not isinstance(bound[0].node, cst.Name):
            raise _Unsafe(f"`{node.value}` is not a single timing event")
        value = self._assigned_value(bound[0].node)
        if not (isinstance(value, cst.Call) and self.qname_in(value.func, self.CALLS) and self._timing_call(value)):
            raise _Unsafe(f"`{node.value}` is not a torch.cuda.Event(enable_timing=True)")
        if id(bound[0]) not in seen:
            self._sites(bound[0], seen)
        return node.value

    def _assigned_value(self, target: cst.CSTNode) -> cst.BaseExpression | None:
        """The value bound to the variable ``target`` by ``target = value`` or ``a, target = x, value``."""
        parent = self.parent(target)
        if isinstance(parent, cst.AssignTarget):
            assign = self.parent(parent)
            return assign.value if isinstance(assign, cst.Assign) else None
        if not isinstance(parent, cst.Element):
            return None
        targets = self.parent(parent)
        assign_target = self.parent(targets) if targets is not None else None
        assign = self.parent(assign_target) if isinstance(assign_target, cst.AssignTarget) else None
        if not (isinstance(targets, (cst.Tuple, cst.List)) and isinstance(assign, cst.Assign)
                and isinstance(assign.value, cst.Tuple) and len(assign.value.elements) == len(targets.elements)):
            return None
        element = assign.value.elements[list(targets.elements).index(parent)]
        return None if isinstance(element, cst.StarredElement) else element.value

    # -- rewrite -------------------------------------------------------------------------
    def _rewrite_pair(self, node: cst.Call, assignment: Assignment,
                      sites: list[tuple[str, cst.CSTNode, object, str]]) -> None:
        clock = "time.perf_counter()"
        imports = (("time", None),)
        self.hit(node, f"{assignment.name}: {_NO_CPU_EVENTS}; timed on the host instead", category="auto",
                 suggestion=clock, transform=_replace_with(clock), add_imports=imports)
        for kind, site, extra, name in sites:
            sync = self.torch_text(f"torch.get_device_module({self.device_ref(site)}).synchronize()")
            if kind == "record":
                self.hit(site, f"{name}.record(): device synchronize, then read the host clock", category="auto",
                         suggestion=f"{sync}; {name} = {clock}", needs_device=True, add_imports=imports,
                         transform=partial(_record, sync=sync, name=name, clock=clock))
            elif kind == "sync":
                self.hit(site, f"{name}.synchronize(): the device synchronize", category="auto", suggestion=sync,
                         needs_device=True, transform=partial(_synchronize, sync=sync))
            else:
                text = f"({extra} - {name}) * 1000"
                if isinstance(self.parent(site), _NEEDS_PARENS):
                    text = f"({text})"
                self.hit(site, f"{name}.elapsed_time({extra}): milliseconds between the two host clock reads",
                         category="auto", suggestion=text, transform=_replace_with(text))


def _replace_with(text: str) -> Transform:
    return lambda updated: expr(text)


def _synchronize(updated: cst.CSTNode, sync: str) -> cst.CSTNode:
    """``e.synchronize()`` -> the device synchronize call (in the same parentheses)."""
    assert isinstance(updated, cst.Call)
    return expr(sync).with_changes(lpar=updated.lpar, rpar=updated.rpar)


def _record(updated: cst.CSTNode, sync: str, name: str, clock: str) -> cst.CSTNode:
    assert isinstance(updated, cst.SimpleStatementLine)
    first = cst.parse_statement(f"{sync}\n").with_changes(leading_lines=updated.leading_lines)
    second = cst.parse_statement(f"{name} = {clock}\n").with_changes(trailing_whitespace=updated.trailing_whitespace)
    # two statements for one line: the engine hands the sentinel on to libcst, which splices them (the
    # rules' Transform type, tools/codemods/base.py, names only a node)
    return cst.FlattenSentinel([first, second])  # type: ignore[return-value]


RULE = Events
