"""The fixes (tools.codemods.fixes): golden in/out pairs, what they refuse, and their contract
(ids, docs, results returned, positions from the original text)."""

from __future__ import annotations

import importlib.util
import re
import sys
from pathlib import Path

import pytest

from tools.codemods.fixes import (
    FIXES,
    Span,
    add_factory_device,
    float32_at,
    host_fallback,
    per_device_backend,
    replace_spans,
    source_lines,
    span_text,
    statement_after_imports,
    syntax_error,
)

_spec = importlib.util.spec_from_file_location("fix_cases", Path(__file__).with_name("fix_cases.py"))
fix_cases = importlib.util.module_from_spec(_spec)
sys.modules["fix_cases"] = fix_cases
_spec.loader.exec_module(fix_cases)  # type: ignore[union-attr]
CASES = fix_cases.cases()
DOCS = Path(__file__).resolve().parents[2] / "docs" / "codemods.md"


def test_every_fix_has_a_golden_case_an_id_and_docs():
    ids = [f.ID for f in FIXES]
    assert len(ids) == len(set(ids)) and all(re.fullmatch(r"FIX0\d\d", i) for i in ids)
    assert {c.fix for c in CASES} == set(ids) == set(fix_cases.FUNCTIONS)
    docs = DOCS.read_text(encoding="utf-8")
    for fix in FIXES:
        assert fix.NAME and fix.DESCRIPTION
        assert f"**{fix.ID}** `{fix.NAME}`" in docs
        module = sys.modules[fix.__module__]
        assert module.FIX is fix and Path(module.__file__).name.startswith(fix.ID.lower() + "_")


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.id)
def test_golden(case):
    assert case.expected.exists(), f"missing {case.expected.name}"
    src = case.src.read_text(encoding="utf-8")
    result = case.run()
    assert result is not None and result.changed and result.fix_id == case.fix, result
    assert result.warnings == ()
    assert result.source == case.expected.read_text(encoding="utf-8")
    assert syntax_error(result.source) is None
    lines = source_lines(src)
    for site in result.sites:  # positions refer to the original text
        assert 0 < site.line <= site.end_line <= len(lines) + 1


def _only_change(old: str, new: str) -> list[tuple[str, str]]:
    a, b = source_lines(old), source_lines(new)
    return [(x, y) for x, y in zip(a, b, strict=False) if x != y]  # a fix may add or drop lines


# --- what the old line splicing got wrong (agent/policy/edits.py before the fixes) -------------

def test_keyword_goes_before_a_comment_that_ends_the_call_line():
    # the spliced ", device=device" landed inside the comment and the edit did not parse
    out = add_factory_device(fix_cases.FIXTURES.joinpath("FIX001/comment_before_paren.in.py").read_text(), 11)
    assert out is not None and "        3,  # rows\n        device=device,\n    )\n" in out.source


def test_expression_operands_are_parenthesised():
    src = "import torch\n\n\ndef f(a, b):\n    return torch.unique(a + b), (a - b).nonzero()\n"
    assert _only_change(src, host_fallback(src, 5, "unique").source) == [(
        "    return torch.unique(a + b), (a - b).nonzero()\n",
        "    return (torch.unique((a + b).cpu())).to((a + b).device), (a - b).nonzero()\n")]  # was a + b.cpu()
    assert "(a - b).cpu().nonzero().to((a - b).device)" in host_fallback(src, 5, "nonzero").source


def test_torch_alias_is_the_function_not_a_receiver():
    # was T.cpu().unique(a).to(T.device)
    src = "import torch as T\n\n\ndef f(a):\n    return T.unique(a)\n"
    assert host_fallback(src, 5, "unique").source.endswith("    return (T.unique(a.cpu())).to(a.device)\n")


def test_float64_in_strings_and_comments_is_left_alone():
    src = 'import torch\nprint("torch.float64", x.to(torch.float64))  # torch.float64\n'
    assert float32_at(src, 2).source == 'import torch\nprint("torch.float64", x.to(torch.float32))  # torch.float64\n'


def test_lines_are_counted_as_python_counts_them():
    # a form feed is whitespace to Python: str.splitlines() made line 5 the old edit's line 4
    src = "import torch\n\x0c\ny = x.double()\nz = x.double()\n"
    assert float32_at(src, 4).source == "import torch\n\x0c\ny = x.double()\nz = x.float()\n"
    assert span_text(src, Span(4, 4, 4, 14)) == "x.double()"
    assert len(source_lines(src)) == 4 and len(src.splitlines()) == 5


def test_other_operand_is_neither_the_factory_argument_nor_a_word_in_a_string():
    src = "import torch\n\n\ndef f(n, x, s):\n    print('s', torch.arange(n) + x)\n"
    assert "torch.arange(n, device=x.device) + x" in add_factory_device(src, 5).source  # was n.device / s.device
    assign = "import torch\n\n\ndef f(x):\n    y = torch.ones(3) + x\n    return y\n"
    assert "torch.ones(3, device=x.device) + x" in add_factory_device(assign, 5).source  # not y, being assigned


def test_factories_inside_a_call_that_starts_on_the_failing_line():
    src = "import torch\ndevice = torch.device('tpx')\nout = torch.cat(\n    [x, torch.zeros(3)],\n)\n"
    assert "    [x, torch.zeros(3, device=device)],\n" in add_factory_device(src, 3).source


def test_module_level_statement_needs_torch_imported_at_module_level():
    # was inserted at module level, where torch is not bound: a NameError at import
    src = "def main():\n    import torch\n    return torch.ones(1)\n"
    result = statement_after_imports(src, 'torch.set_float32_matmul_precision("highest")')
    assert result is not None and not result.changed and result.source == src
    assert "does not import torch at module level" in result.warnings[0]


# --- nothing to do, or refused ----------------------------------------------------------------

@pytest.mark.parametrize(("src", "line"), [
    ("import torch\n\n\ndef f(x):\n    return x + torch.zeros(3, device=x.device)\n", 5),  # already has one
    ("import torch\n\n\ndef f(x):\n    return x + 1\n", 5),  # no factory
    ("import torch\nimport numpy as np\n\n\ndef f(x):\n    return torch.bernoulli(x)\n", 6),  # takes no device=
])
def test_factory_device_has_nothing_to_do(src, line):
    assert add_factory_device(src, line) is None


def test_factory_device_without_a_device_to_name_warns():
    src = "import torch\nprint(torch.ones(3) + 1)\n"
    result = add_factory_device(src, 2)
    assert result is not None and not result.changed and result.source == src
    assert result.warnings == ("FIX001: no device variable or device operand in scope at line 2",)


def test_fixes_leave_modules_without_torch_and_code_that_does_not_parse():
    assert float32_at("import numpy as np\nx = np.zeros(2).double()\n", 2) is None
    assert per_device_backend("import os\nos.init_process_group('gloo')\n") is None
    assert float32_at("def f(:\n", 1) is None


def test_backend_already_per_device_is_not_edited_again():
    src = ('import torch\nimport torch.distributed as dist\ndist.init_process_group('
           'backend=f"cpu:gloo,{torch.accelerator.current_accelerator().type}:gloo")\n')
    assert per_device_backend(src) is None


def test_host_fallback_without_a_tensor_argument_warns():
    result = host_fallback("import torch\ny = torch.unique()\n", 2, "unique")
    assert result is not None and not result.changed and "no positional tensor argument" in result.warnings[0]


def test_replacements_that_are_not_expressions_or_spans_that_are_none_are_left():
    src = "import torch\nx = torch.ones(2).cuda(1)\n"
    call = Span(2, 4, 2, 25)
    assert span_text(src, call) == "torch.ones(2).cuda(1)"
    prose = replace_spans(src, [(call, "guard it with `if device.type == 'cuda':`")])
    assert prose is not None and not prose.changed and "is not an expression" in prose.warnings[0]
    nowhere = replace_spans(src, [(Span(2, 3, 2, 25), "y")])
    assert nowhere is not None and not nowhere.changed and "no expression has exactly this span" in nowhere.warnings[0]
    # overlapping: the span that starts later wins, the other is reported
    both = replace_spans(src, [(call, "torch.ones(2).to(device)"), (Span(2, 15, 2, 16), "3")])
    assert both.source == "import torch\nx = torch.ones(3).cuda(1)\n" and "overlaps" in both.warnings[0]


def test_an_edit_that_would_not_parse_is_not_returned():
    src = "import torch\nx = 1\n"
    result = replace_spans(src, [(Span(2, 0, 2, 1), "f()")])  # f() = 1
    assert result is not None and not result.changed and result.source == src
    assert "would not parse" in result.warnings[-1]
