"""FRY054 (placement.cli-device): device selection on the command line defaults to the available accelerator.

pytorch/examples-style programs choose CUDA from a flag that is off by default (``--cuda``, store_true),
a ``--device`` option whose default is ``'cpu'`` beside a CUDA path, ``parser.set_defaults(cuda=False)``
or a hard-coded ``use_cuda = False``: after the rest of the migration such a program still runs its work
on the CPU (catalogue 55). Each becomes "the accelerator when one is available", and the user can still
ask for the CPU: ``--cuda`` becomes ``argparse.BooleanOptionalAction`` (``--cuda`` / ``--no-cuda``),
``--device cpu`` still works, a ``--no-cuda`` flag keeps its meaning. On a machine without an accelerator
every default is the CPU, as before. A ``--device`` string option read back as ``args.device`` gets, right
after its parse, ``args.device = ferry_cli_device(args.device)`` (tools.codemods.cli_device): ``--device cuda``
or ``cuda:1`` then selects the available accelerator with that index where CUDA is absent, and means CUDA
where CUDA is there; "cpu" and "mps" stay. What the rule cannot decide (a negative flag beside the positive one,
another action, a switch assigned more than once) is left for review with the reason.
"""

from __future__ import annotations

import re

import libcst as cst

from tools.codemods import cli_device
from tools.codemods.base import CodemodRule, RuleContext
from tools.codemods.nodes import add_kwarg, bool_value, code, expr, kwarg, string_value

#: flag destinations that turn CUDA on / off (``--use-cuda`` -> use_cuda)
_ON = re.compile(r"^(use_|with_|enable_)?(cuda|gpu)$", re.I)
_OFF = re.compile(r"^(no_?|disable_)(cuda|gpu)$", re.I)
_AVAILABLE = "torch.accelerator.is_available()"
_ADD_ARGUMENT = "add_argument"
_PARSE = ("parse_args", "parse_known_args")


def _dest(option: str) -> str:
    return option.lstrip("-").replace("-", "_")


def _options(call: cst.Call) -> list[str]:
    """The option strings of an ``add_argument`` call (``"--no-cuda"``, ``"-c"``)."""
    found = []
    for arg in call.args:
        if arg.keyword is not None or arg.star:
            break
        value = string_value(arg.value)
        if value is None or not value.startswith("-"):
            return []
        found.append(value)
    return found


def _long_dest(call: cst.Call) -> str | None:
    """Where an option stores its value: ``dest=``, else its first long option, else its first option."""
    dest = kwarg(call, "dest")
    if dest is not None:
        return string_value(dest.value)
    options = _options(call)
    longs = [o for o in options if o.startswith("--")]
    return _dest((longs or options)[0]) if options else None


def _is_add_argument(node: cst.Call) -> bool:
    return isinstance(node.func, cst.Attribute) and node.func.attr.value == _ADD_ARGUMENT


class CliDevice(CodemodRule):
    ID = "FRY054"
    NAME = "placement.cli-device"
    DESCRIPTION = ("Device selection on the command line defaults to the available accelerator (catalogue 55): "
                   "add_argument('--cuda', action='store_true') -> action=argparse.BooleanOptionalAction, "
                   "default=torch.accelerator.is_available() (--cuda / --no-cuda); an option default=False of a "
                   "CUDA switch, set_defaults(cuda=False) and a module's use_cuda = False assigned once -> "
                   "torch.accelerator.is_available() (a --no-cuda default=True -> not ...); --device default='cpu' "
                   "in a module with a CUDA path -> the accelerator's type name, 'cpu' without one (--device cpu "
                   "still works); after the parse of a --device string option read back as args.device, args.device = "
                   "ferry_cli_device(args.device), a helper inserted once: a CUDA device string ('cuda', 'cuda:1') "
                   "selects the available accelerator with the same index where CUDA is absent ('cpu', 'mps' and "
                   "every value on CUDA stay). A --no-cuda flag defaulting off keeps its meaning. Review: a positive "
                   "flag beside a negative one for the same destination, other actions, a switch assigned more than "
                   "once, argparse imported under another name, a --device string option read back here but not "
                   "parsed on a line of its own (args = parser.parse_args()).")
    CATEGORY = "auto"
    ENTRIES = (55,)
    METADATA_DEPENDENCIES = ()  # syntactic: option strings, literals and module-level names

    def __init__(self, ctx: RuleContext) -> None:
        super().__init__(ctx)
        self._arguments: list[cst.Call] = []
        self._set_defaults: list[cst.Call] = []
        self._switches: list[cst.Assign] = []
        self._assigned: dict[str, int] = {}
        self._cuda_path = False
        self._argparse_alias = False
        self._help_strings: set[int] = set()
        self._parses: list[tuple[cst.SimpleStatementLine, str]] = []
        self._device_reads: set[str] = set()
        self._has_helper = False

    # -- collection ----------------------------------------------------------------------
    def visit_Import(self, node: cst.Import) -> None:
        for alias in node.names:
            if code(alias.name) == "argparse" and alias.asname is not None:
                self._argparse_alias = True

    def visit_Call(self, node: cst.Call) -> None:
        if _is_add_argument(node) and _options(node):
            self._arguments.append(node)
            help_arg = kwarg(node, "help")
            if help_arg is not None:
                self._help_strings.add(id(help_arg.value))
        elif isinstance(node.func, cst.Attribute) and node.func.attr.value == "set_defaults":
            self._set_defaults.append(node)
        elif cli_device.is_helper_call(node):
            self._has_helper = True

    def visit_FunctionDef(self, node: cst.FunctionDef) -> None:
        if node.name.value == cli_device.HELPER_NAME:
            self._has_helper = True

    def visit_Assign(self, node: cst.Assign) -> None:
        for target in node.targets:
            if isinstance(target.target, cst.Name):
                self._assigned[target.target.value] = self._assigned.get(target.target.value, 0) + 1
        if (len(node.targets) == 1 and isinstance(node.targets[0].target, cst.Name)
                and _ON.match(node.targets[0].target.value) and bool_value(node.value) is False
                and self.ctx.module is not None and self._at_module_level(node)):
            self._switches.append(node)
        self._parse(node)

    def _parse(self, node: cst.Assign) -> None:
        """``args = parser.parse_args(...)`` / ``args, rest = parser.parse_known_args(...)`` on a line of its own."""
        value = node.value
        if not (len(node.targets) == 1 and isinstance(value, cst.Call) and isinstance(value.func, cst.Attribute)
                and value.func.attr.value in _PARSE):
            return
        target: cst.BaseExpression = node.targets[0].target
        if isinstance(target, cst.Tuple) and target.elements and value.func.attr.value == "parse_known_args":
            target = target.elements[0].value
        line = self.parent(node)
        if isinstance(target, cst.Name) and isinstance(line, cst.SimpleStatementLine) and len(line.body) == 1:
            self._parses.append((line, target.value))

    def visit_AugAssign(self, node: cst.AugAssign) -> None:
        if isinstance(node.target, cst.Name):
            self._assigned[node.target.value] = self._assigned.get(node.target.value, 0) + 2

    def visit_AnnAssign(self, node: cst.AnnAssign) -> None:
        if isinstance(node.target, cst.Name):
            self._assigned[node.target.value] = self._assigned.get(node.target.value, 0) + 1

    def visit_Name(self, node: cst.Name) -> None:
        if "cuda" in node.value.lower():
            self._cuda_path = True

    def visit_Attribute(self, node: cst.Attribute) -> None:
        if "cuda" in node.attr.value.lower():
            self._cuda_path = True
        if node.attr.value == "device" and isinstance(node.value, cst.Name):
            self._device_reads.add(node.value.value)

    def visit_SimpleString(self, node: cst.SimpleString) -> None:
        value = string_value(node)
        if value is not None and value.lower().startswith("cuda") and id(node) not in self._help_strings:
            self._cuda_path = True

    def _at_module_level(self, node: cst.CSTNode) -> bool:
        line = self.parent(node)
        return isinstance(line, cst.SimpleStatementLine) and self.parent(line) is self.ctx.module

    # -- decisions, once the whole module has been seen ------------------------------------
    def leave_Module(self, original_node: cst.Module) -> None:
        all_options = {o for call in self._arguments for o in _options(call)}
        dests: dict[str, list[cst.Call]] = {}
        for call in self._arguments:
            dest = _long_dest(call)
            if dest is not None:
                dests.setdefault(dest, []).append(call)
        defaults = {a.keyword.value: a for call in self._set_defaults for a in call.args if a.keyword is not None}
        for call in self._arguments:
            self._argument(call, all_options, dests, defaults)
        for name, arg in defaults.items():
            self._default_keyword(arg, name)
        for node in self._switches:
            self._switch(node)
        options = dests.get("device", [])
        if not self._has_helper and len(options) == 1 and _takes_a_cuda_string(options[0]):
            parses = [(line, name) for line, name in self._parses if name in self._device_reads]
            for line, name in parses:
                self._map_after_parse(line, name)
            if not parses and self._device_reads:  # read back here, but not parsed where a line can follow
                self.hit(options[0], "--device takes a device string, read back here but not parsed on a line "
                         "of its own (`args = parser.parse_args()`) that a mapping could follow: `--device cuda` "
                         "fails where CUDA is absent",
                         category="review", suggestion=f"after the parse: args.device = {cli_device.HELPER_NAME}"
                         "(args.device), mapping cuda[:N] to the available accelerator")

    def _map_after_parse(self, line: cst.SimpleStatementLine, name: str) -> None:
        """After the parse: ``args.device = ferry_cli_device(args.device)``, the helper inserted once."""
        target = f"{name}.device"
        call = cli_device.call_statement(target)

        def transform(updated: cst.CSTNode) -> cst.CSTNode:
            # two statements for one line: the engine hands the sentinel on to libcst (as FRY019's do)
            return cst.FlattenSentinel([updated, call])  # type: ignore[return-value]

        self.hit(line, f"--device takes a device string: `--device cuda` (or cuda:N) fails where CUDA is absent; "
                 f"{target} = {cli_device.HELPER_NAME}({target}) after the parse selects the available "
                 "accelerator with that index there (cpu, mps and every value on CUDA stay)", category="auto",
                 suggestion=f"{target} = {cli_device.HELPER_NAME}({target})", transform=transform,
                 add_imports=(("torch", None),),
                 add_definitions=((cli_device.HELPER_NAME, self.torch_text(cli_device.HELPER_SOURCE)),))

    def _argument(self, call: cst.Call, all_options: set[str], dests: dict[str, list[cst.Call]],
                  defaults: dict[str, cst.Arg]) -> None:
        dest = _long_dest(call)
        if dest is None:
            return
        action_arg, default_arg = kwarg(call, "action"), kwarg(call, "default")
        action = string_value(action_arg.value) if action_arg is not None else None
        if dest == "device" and default_arg is not None and string_value(default_arg.value) == "cpu":
            if self._cuda_path and dest not in defaults:
                self.replace_expression(default_arg.value, "--device defaults to the CPU beside a CUDA path: "
                                        "the run stays on the CPU", self.device_string(default_arg.value))
            return
        names = {_dest(o) for o in _options(call)} | {dest}
        if any(_OFF.match(n) for n in names):
            if default_arg is not None and bool_value(default_arg.value) is True:
                self._keyword_value(default_arg, f"not {_AVAILABLE}", "a --no-cuda switch on by default")
            return
        if not any(_ON.match(n) for n in names):
            return
        if dest in defaults:
            return  # set_defaults decides the default (_default_keyword)
        if action == "store_true" and (default_arg is None or bool_value(default_arg.value) is False):
            self._store_true(call, dest, all_options, dests)
        elif action is None and default_arg is not None and bool_value(default_arg.value) is False:
            self._keyword_value(default_arg, _AVAILABLE, f"{_options(call)[0]} defaults to False: the run stays on "
                                "the CPU")
        elif action not in (None, "store_true") and not (default_arg is not None and bool_value(default_arg.value)):
            self.hit(call, f"a CUDA switch with action={action!r}: Ferry cannot tell its default", category="review",
                     suggestion=f"default={_AVAILABLE}")

    def _store_true(self, call: cst.Call, dest: str, all_options: set[str], dests: dict[str, list[cst.Call]]) -> None:
        longs = [o for o in _options(call) if o.startswith("--")]
        shown = longs[0] if longs else _options(call)[0]
        # BooleanOptionalAction adds --no-<option> for each long option: it must not exist already
        wanted = {f"no_{_dest(o)}" for o in longs}
        negative = sorted(o for o in all_options if _dest(o) in wanted)
        others = [c for c in dests.get(dest, []) if c is not call]
        if negative or others or self._argparse_alias or not longs:
            why = ("another option stores into the same destination" if others
                   else f"{negative[0]} already exists" if negative
                   else "argparse is imported under another name" if self._argparse_alias
                   else "it has no long option to negate")
            self.hit(call, f"{shown} is off by default (the run stays on the CPU) and {why}: the default is "
                     "left as it is", category="review", suggestion=f"default={_AVAILABLE}")
            return
        action_text = "argparse.BooleanOptionalAction"
        available = self.torch_text(_AVAILABLE)

        def transform(updated: cst.CSTNode) -> cst.CSTNode:
            assert isinstance(updated, cst.Call)
            args = []
            has_default = False
            for arg in updated.args:
                if arg.keyword is not None and arg.keyword.value == "action":
                    arg = arg.with_changes(value=expr(action_text))
                elif arg.keyword is not None and arg.keyword.value == "default":
                    arg = arg.with_changes(value=expr(available))
                    has_default = True
                args.append(arg)
            new = updated.with_changes(args=args)
            if not has_default:
                new = add_kwarg(new, "default", expr(available))
            return new

        self.hit(call, f"{shown} (store_true) is off by default: the run stays on the CPU", category="auto",
                 suggestion=f"action={action_text}, default={available}  ({shown} / --no-{shown[2:]})",
                 transform=transform, add_imports=(("argparse", None), ("torch", None)))

    def _default_keyword(self, arg: cst.Arg, name: str) -> None:
        assert arg.keyword is not None
        if _ON.match(name) and bool_value(arg.value) is False:
            self._keyword_value(arg, _AVAILABLE, f"set_defaults({name}=False): the run stays on the CPU")
        elif _OFF.match(name) and bool_value(arg.value) is True:
            self._keyword_value(arg, f"not {_AVAILABLE}", f"set_defaults({name}=True): the run stays on the CPU")
        elif name == "device" and string_value(arg.value) == "cpu" and self._cuda_path:
            self.replace_expression(arg.value, "set_defaults(device='cpu') beside a CUDA path: the run stays on "
                                    "the CPU", self.device_string(arg.value))

    def _keyword_value(self, arg: cst.Arg, text: str, message: str) -> None:
        self.replace_expression(arg.value, message, self.torch_text(text))

    def _switch(self, node: cst.Assign) -> None:
        target = node.targets[0].target
        assert isinstance(target, cst.Name)
        if self._assigned.get(target.value, 0) > 1:
            self.hit(node, f"{target.value} = False and {target.value} is assigned again: Ferry cannot tell which "
                     "is the default", category="review", suggestion=f"{target.value} = {_AVAILABLE}")
            return
        self.replace_expression(node.value, f"{target.value} = False: the run stays on the CPU",
                                self.torch_text(_AVAILABLE))


def _takes_a_cuda_string(call: cst.Call) -> bool:
    """A ``--device`` option that stores the string given (no other type, action or nargs), and whose
    ``choices=``, where it lists them, include a CUDA device."""
    type_arg, action_arg = kwarg(call, "type"), kwarg(call, "action")
    if type_arg is not None and code(type_arg.value).strip() != "str":
        return False
    if action_arg is not None and string_value(action_arg.value) != "store":
        return False
    if kwarg(call, "nargs") is not None:
        return False
    choices = kwarg(call, "choices")
    if choices is not None and isinstance(choices.value, (cst.List, cst.Tuple, cst.Set)):
        values = [string_value(e.value) for e in choices.value.elements]
        return any(v is None or v.startswith("cuda") for v in values)
    return True


RULE = CliDevice
