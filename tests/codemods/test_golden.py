"""Golden fixtures: every rule has at least one; each .in.py rewrites to its .out.py, the rule
fires on it, the output parses and a second run changes nothing."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import libcst as cst
import pytest

from tools.codemods.engine import analyze
from tools.codemods.prefilter import may_contain_idioms
from tools.codemods.registry import all_rules

_spec = importlib.util.spec_from_file_location("fixture_cases", Path(__file__).with_name("fixture_cases.py"))
fixture_cases = importlib.util.module_from_spec(_spec)
sys.modules["fixture_cases"] = fixture_cases
_spec.loader.exec_module(fixture_cases)  # type: ignore[union-attr]
CASES = fixture_cases.cases()


def test_every_rule_has_a_fixture_and_every_fixture_a_rule():
    rule_ids = {r.ID for r in all_rules()}
    fixture_rules = {c.rule for c in CASES}
    assert rule_ids == fixture_rules
    assert len(rule_ids) == 58


def test_every_catalogue_entry_is_covered_by_a_rule():
    entries = {e for r in all_rules() for e in r.ENTRIES}
    assert entries == set(range(1, 59)) | {60, 61, 62}


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.id)
def test_golden(case):
    assert case.expected.exists(), f"missing {case.expected.name}"
    src = case.src.read_text(encoding="utf-8")
    outcome = analyze(src, device_mode=case.device)
    assert outcome.new_source == case.expected.read_text(encoding="utf-8")
    assert case.rule in {f.rule_id for f in outcome.findings}, f"{case.rule} did not fire on {case.id}"
    assert outcome.warnings == []


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.id)
def test_output_parses_and_second_run_changes_nothing(case):
    out = case.expected.read_text(encoding="utf-8")
    cst.parse_module(out)
    compile(out, str(case.expected), "exec")
    again = analyze(out, device_mode=case.device)
    assert again.new_source == out
    assert all(f.category != "auto" for f in again.findings)


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.id)
def test_prefilter_never_skips_a_fixture(case):
    assert may_contain_idioms(case.src.read_text(encoding="utf-8"))


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.id)
def test_review_only_fixtures_are_left_unchanged(case):
    """A fixture whose findings are all review/unsupported must come back byte-for-byte."""
    src = case.src.read_text(encoding="utf-8")
    outcome = analyze(src, device_mode=case.device)
    if all(f.category != "auto" for f in outcome.findings):
        assert outcome.new_source == src


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.id)
def test_single_pass_equals_fixed_point(case):
    """Transforms compose, so one pass already reaches the fixed point."""
    src = case.src.read_text(encoding="utf-8")
    one = analyze(src, device_mode=case.device)
    fixed = analyze(src, device_mode=case.device, fixed_point=True)
    assert one.new_source == fixed.new_source
    # contextual rules (fp16/fp64, jit, performance) only report next to other CUDA idioms,
    # so once everything else is rewritten the fixed point drops them
    contextual = {r.ID for r in all_rules() if r.CONTEXTUAL}
    assert [f.rule_id for f in fixed.remaining] == [
        f.rule_id for f in one.remaining if f.rule_id not in contextual or
        any(g.rule_id not in contextual for g in fixed.remaining)]
