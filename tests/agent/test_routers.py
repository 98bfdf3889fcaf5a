"""Routers are pure functions of the state (the tools' models as the state stores them)."""

from agent.migration import edges
from agent.migration.records import CpuCheck
from agent.migration.state import MigrationOptions, dump
from tools.parity.models import ParityReport
from tools.runner.models import RunResult


def _run(status: str, exit_code: int | None) -> dict:
    return dump(RunResult(command=["python", "x.py"], exit_code=exit_code, status=status, duration_s=1.0,
                          stdout_tail="", stderr_tail="", isolation="bwrap"))


def _opts(llm: bool = False, test_command: str | None = None) -> dict:
    return dump(MigrationOptions(source="/repo", run_command="python x.py", state_dir="/state", llm=llm,
                                 test_command=test_command))


def _parity(verdict: str) -> dict:
    return dump(ParityReport(verdict=verdict, summary=f"parity {verdict}", ref_dir="/r", target_dir="/t",
                             counts={verdict: 1}, modules=[], tensors=[], scalars=[]))


OK = _run("ok", 0)
FAILED = _run("failed", 1)


def test_a_status_always_routes_to_report():
    s = {"status": "needs_human", "last_run": OK, "proposal": {"rule": "x"}, "options": _opts(llm=True)}
    assert edges.after_ingest(s) == "report"
    assert edges.after_reference(s) == "report"
    assert edges.after_step(s) == "report"
    assert edges.after_target(s) == "report"
    assert edges.after_diagnose(s) == "report"
    assert edges.after_llm(s) == "report"
    assert edges.after_apply(s) == "report"
    assert edges.after_parity(s) == "report"
    assert edges.after_cpu_check(s) == "report"


def test_linear_steps_go_on_without_status():
    assert edges.after_ingest({}) == "reference_run"
    assert edges.after_reference({"status": None}) == "scan"
    assert edges.after_step({}) == "next"
    assert edges.after_apply({}) == "target_run"


def test_target_run_outcome():
    assert edges.after_target({"last_run": OK}) == "parity"
    assert edges.after_target({"last_run": FAILED}) == "diagnose"
    assert edges.after_target({"last_run": _run("ok", 3)}) == "diagnose"
    assert edges.after_target({}) == "diagnose"


def test_diagnose_prefers_rule_then_model():
    assert edges.after_diagnose({"proposal": {"rule": "r"}, "options": _opts(llm=True)}) == "apply_fix"
    assert edges.after_diagnose({"proposal": None, "options": _opts(llm=True)}) == "llm_fix"
    assert edges.after_diagnose({"proposal": None, "options": _opts(llm=False)}) == "report"
    assert edges.after_llm({"proposal": {"rule": "llm"}}) == "apply_fix"
    assert edges.after_llm({"proposal": None}) == "report"


def test_parity_outcome():
    assert edges.after_parity({"parity": _parity("pass"), "options": _opts()}) == "cpu_check"
    assert edges.after_parity({"parity": _parity("pass"), "options": _opts(test_command="pytest")}) == "tests"
    assert edges.after_parity({"proposal": {"rule": "matmul_precision_highest"}, "options": _opts()}) == "apply_fix"
    # a warn verdict passes
    assert edges.after_parity({"parity": _parity("warn"), "options": _opts(llm=True)}) == "cpu_check"


def test_nothing_compared_is_not_a_failure():
    """A report with nothing to compare goes on (the report node says parity could not be shown);
    it is never routed as a failure to the model or to the end."""
    skipped = _parity("skipped")
    assert edges.after_parity({"parity": skipped, "options": _opts(llm=True, test_command="pytest")}) == "tests"
    assert edges.after_parity({"parity": skipped, "options": _opts(llm=False)}) == "cpu_check"
    report = ParityReport.model_validate(skipped)
    assert not report.compared and not report.passed and not report.failed


def test_parity_failure_no_rule_explains_goes_to_the_model_only_with_llm():
    failed = _parity("fail")
    assert edges.after_parity({"parity": failed, "proposal": None, "options": _opts(llm=True)}) == "llm_fix"
    assert edges.after_parity({"parity": failed, "proposal": None, "options": _opts(llm=False)}) == "report"
    assert edges.after_parity({"parity": failed, "options": _opts(llm=True, test_command="pytest")}) == "llm_fix"
    # a rule's fix still comes first, and a decided status (partial, failed_budget) still ends it
    assert edges.after_parity({"parity": failed, "proposal": {"rule": "r"},
                                 "options": _opts(llm=True)}) == "apply_fix"
    assert edges.after_parity({"parity": failed, "status": "failed_budget", "options": _opts(llm=True)}) == "report"
    assert ParityReport.model_validate(_parity("pass")).passed and not ParityReport.model_validate(failed).passed


def test_tests_outcome():
    assert edges.after_tests({"last_run": OK}) == "cpu_check"
    assert edges.after_tests({"last_run": FAILED}) == "diagnose"
    assert edges.after_tests({"status": "failed_timeout", "last_run": OK}) == "report"


def _check(verdict: str = "fail", rejected: str | None = None) -> dict:
    return dump(CpuCheck(verdict=verdict, passed=verdict == "pass", reason="r", run_status="failed",
                         rejected_edit=rejected))


def test_cpu_check_outcome_is_judged_by_the_report_node():
    """A failed CPU guard still gets its profile; only a decided status ends the graph there."""
    assert edges.after_cpu_check({"cpu_check": _check(), "options": _opts(llm=True)}) == "profile"
    assert edges.after_cpu_check({}) == "profile"
    assert edges.after_cpu_check({"status": "failed_sandbox"}) == "report"


def test_a_model_edit_the_cpu_guard_rejected_goes_back_to_the_model():
    rejected = _check(rejected="fix-2")
    assert edges.after_cpu_check({"cpu_check": rejected, "options": _opts(llm=True)}) == "llm_fix"
    assert edges.after_cpu_check({"cpu_check": rejected, "options": _opts(llm=False)}) == "profile"
    assert edges.after_cpu_check({"cpu_check": rejected, "status": "failed_budget",
                                    "options": _opts(llm=True)}) == "report"


def test_an_environment_failure_is_explained_by_the_model_only_with_llm():
    for llm, nxt in ((True, "llm_explain"), (False, "report")):
        s = {"status": "failed_environment", "last_run": FAILED, "options": _opts(llm=llm)}
        assert edges.after_reference(s) == nxt
        assert edges.after_target(s) == nxt
        assert edges.after_diagnose(s) == nxt
    # other statuses are not explained
    assert edges.after_diagnose({"status": "needs_human", "options": _opts(llm=True)}) == "report"
