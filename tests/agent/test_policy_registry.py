"""The offline policy's rules are classes found in the rules_* modules, asked in their ORDER."""

from __future__ import annotations

import pytest

from agent.policy import rules_verdicts
from agent.policy.base import Diagnosis, FixContext, PolicyRule, UserFrame, Verdict
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


def _frame_diag(kind: str, message: str = "", phase: str = "run") -> Diagnosis:
    return Diagnosis(kind=kind, phase=phase, exc_type="RuntimeError", message=message,
                     frames=[UserFrame(file="m.py", line=1, function="<module>")])


# a diagnosis each verdict rule answers (every class of rules_verdicts has one below: checked)
VERDICT_CASES = [
    _frame_diag("other", "tpx: could not build the extension"),
    _frame_diag("import_error", "Failed to load the backend extension: tpx"),
    _frame_diag("other", "ProcessGroupGloo::allreduce: unsupported device type tpx"),
    _frame_diag("tpx_oom", "tpx out of memory: requested 2.00 GiB, capacity 16.00 GiB"),
    _frame_diag("missing_cuda_package", "No module named 'apex'"),
    _frame_diag("syntax_error", "invalid syntax"),
    _frame_diag("import_error", "No module named 'nothere'"),
    _frame_diag("teardown_hang", "the process did not exit"),
]


def test_every_verdict_a_rule_returns_carries_that_rules_own_id(tmp_path) -> None:
    """Issue 28: a verdict is named by the class that made it (its ID), never by a literal that can drift."""
    (tmp_path / "m.py").write_text("import torch\n")
    contexts = [FixContext(source=tmp_path, known_files=["m.py"]),
                FixContext(source=tmp_path, known_files=["m.py"], files={"m.py": "def broken(:\n"})]
    answered: set[str] = set()
    for rule in policy_rules():
        for diag in VERDICT_CASES:
            if diag.kind not in rule.KINDS:
                continue
            for ctx in contexts:
                got = rule.apply(diag, ctx)
                if isinstance(got, Verdict):
                    assert got.rule == rule.ID, (rule.__name__, diag.kind, got.rule)
                    answered.add(rule.__name__)
    verdict_classes = {name for name, value in vars(rules_verdicts).items()
                       if isinstance(value, type) and issubclass(value, PolicyRule) and value is not PolicyRule
                       and value.__module__ == rules_verdicts.__name__}
    assert verdict_classes == answered, verdict_classes ^ answered
