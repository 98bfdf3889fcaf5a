"""The offline policy's rules are classes found in the rules_* modules, asked in their ORDER."""

from __future__ import annotations

import pytest

from agent.policy import rules_verdicts
from agent.policy.base import Diagnosis, FixContext, PolicyRule, Verdict
from agent.policy.catalogue import known_rules
from agent.policy.engine import propose
from agent.policy.registry import descriptions, policy_rules


def test_every_rule_class_is_found_once_in_its_order_and_described() -> None:
    rules = policy_rules()
    assert [r.ORDER for r in rules] == sorted(r.ORDER for r in rules)
    assert len({r.__name__ for r in rules}) == len(rules) >= 14
    assert rules[0].ID == "tpx_backend_unavailable" and rules[-1].ID == "matmul_precision_highest"
    # two classes reach the precision fix: one id for the user to name, described once
    assert [r.__name__ for r in rules if r.ID == "matmul_precision_highest"] == [
        "MatmulPrecisionHighest", "MatmulPrecisionAfterDrift"]
    known = known_rules()
    for rule_id, text in descriptions().items():
        assert known[rule_id] == text and text


def test_a_duplicate_order_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    class Clash(PolicyRule):
        ID = "clash"
        KINDS = ("other",)
        ORDER = rules_verdicts.TeardownHang.ORDER
        DESCRIPTION = "a second rule at the same place"

    Clash.__module__ = rules_verdicts.__name__
    monkeypatch.setattr(rules_verdicts, "Clash", Clash, raising=False)
    with pytest.raises(RuntimeError, match="share an ORDER"):
        policy_rules.__wrapped__()


def test_a_new_rule_class_is_asked_without_being_listed_anywhere(monkeypatch: pytest.MonkeyPatch, tmp_path) -> None:
    seen: list[str] = []

    class Early(PolicyRule):
        ID = "early_words"
        KINDS = ("other",)
        ORDER = 1
        DESCRIPTION = "asked before every other rule of kind other"

        @staticmethod
        def apply(diag: Diagnosis, ctx: FixContext) -> Verdict | None:
            seen.append(diag.kind)
            return Verdict(rule="early_words", status="needs_human", summary="stop here")

    Early.__module__ = rules_verdicts.__name__
    monkeypatch.setattr(rules_verdicts, "Early", Early, raising=False)
    fresh = policy_rules.__wrapped__()
    monkeypatch.setattr("agent.policy.engine.policy_rules", lambda: fresh)
    diag = Diagnosis(kind="other", phase="run", exc_type="RuntimeError", message="boom")
    got = propose(diag, FixContext(source=tmp_path))
    assert seen == ["other"] and isinstance(got, Verdict) and got.rule == "early_words"
