"""Routers are pure functions of the state."""

from agent import routers

OK = {"status": "ok", "exit_code": 0}
FAILED = {"status": "failed", "exit_code": 1}


def test_a_status_always_routes_to_report():
    s = {"status": "needs_human", "last_run": OK, "proposal": {"rule": "x"}, "options": {"llm": True}}
    assert routers.after_ingest(s) == "report"
    assert routers.after_reference(s) == "report"
    assert routers.after_step(s) == "report"
    assert routers.after_target(s) == "report"
    assert routers.after_diagnose(s) == "report"
    assert routers.after_llm(s) == "report"
    assert routers.after_apply(s) == "report"
    assert routers.after_parity(s) == "report"


def test_linear_steps_go_on_without_status():
    assert routers.after_ingest({}) == "reference_run"
    assert routers.after_reference({"status": None}) == "scan"
    assert routers.after_step({}) == "next"
    assert routers.after_apply({}) == "target_run"


def test_target_run_outcome():
    assert routers.after_target({"last_run": OK}) == "parity"
    assert routers.after_target({"last_run": FAILED}) == "diagnose"
    assert routers.after_target({"last_run": {"status": "ok", "exit_code": 3}}) == "diagnose"
    assert routers.after_target({}) == "diagnose"


def test_diagnose_prefers_rule_then_model():
    assert routers.after_diagnose({"proposal": {"rule": "r"}, "options": {"llm": True}}) == "apply_fix"
    assert routers.after_diagnose({"proposal": None, "options": {"llm": True}}) == "llm_fix"
    assert routers.after_diagnose({"proposal": None, "options": {"llm": False}}) == "report"
    assert routers.after_llm({"proposal": {"rule": "llm"}}) == "apply_fix"
    assert routers.after_llm({"proposal": None}) == "report"


def test_parity_outcome():
    assert routers.after_parity({"parity": {"passed": True}, "options": {"test_command": None}}) == "profile"
    assert routers.after_parity({"parity": {"passed": True}, "options": {"test_command": "pytest"}}) == "tests"
    assert routers.after_parity({"proposal": {"rule": "matmul_precision_highest"}}) == "apply_fix"
    # a warn verdict passes (ParityReport JSON carries "verdict", not "passed")
    assert routers.after_parity({"parity": {"verdict": "warn"}, "options": {"llm": True}}) == "profile"


def test_parity_failure_no_rule_explains_goes_to_the_model_only_with_llm():
    failed = {"verdict": "fail", "first_divergence": {"key": "Net.norm#0"}}
    assert routers.after_parity({"parity": failed, "proposal": None, "options": {"llm": True}}) == "llm_fix"
    assert routers.after_parity({"parity": failed, "proposal": None, "options": {"llm": False}}) == "report"
    assert routers.after_parity({"parity": {"passed": False}, "options": {"llm": True, "test_command": "pytest"}}) == "llm_fix"
    # a rule's fix still comes first, and a decided status (partial, failed_budget) still ends it
    assert routers.after_parity({"parity": failed, "proposal": {"rule": "r"}, "options": {"llm": True}}) == "apply_fix"
    assert routers.after_parity({"parity": failed, "status": "failed_budget", "options": {"llm": True}}) == "report"
    assert routers.parity_passed({"verdict": "pass"}) and not routers.parity_passed({"verdict": "fail"})


def test_tests_outcome():
    assert routers.after_tests({"last_run": OK}) == "profile"
    assert routers.after_tests({"last_run": FAILED}) == "diagnose"
    assert routers.after_tests({"status": "failed_timeout", "last_run": OK}) == "report"
