"""The eval harness end to end on a two-case suite (tests/evals/suite): real migrations, hidden
grading tests on a fresh patched copy, results.jsonl, leaderboard and HTML report; regrade and
compare on a recorded run (tests/evals/recorded); bad suites are clear errors."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from evals.cases import SuiteError, load_suite
from evals.compare import compare
from evals.harness import run_suite
from evals.prices import Prices
from evals.regrade import regrade
from evals.results import CaseResult, read_results

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
SUITE = HERE / "suite"
RECORDED = HERE / "recorded"


def _ferry(*args: str, timeout: float = 900) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "agent.cli", *args], cwd=ROOT, capture_output=True, text=True,
                          timeout=timeout, env={**os.environ, "COLUMNS": "200"})


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory) -> Path:
    """One real eval run of the two-case suite (both cases side by side), shared by the tests below."""
    out = tmp_path_factory.mktemp("eval") / "run"
    events: list[tuple[str, str]] = []
    results = run_suite(load_suite(SUITE), out, jobs=2, progress=lambda n, e, d: events.append((n, e)))
    assert [r.name for r in results] == ["tiny_placement", "tiny_unresolved"]
    assert {e for _, e in events} >= {"started", "finished"}
    return out


def test_a_case_is_resolved_only_when_its_hidden_tests_pass_on_the_patched_copy(run_dir):
    results = {r.name: r for r in read_results(run_dir)}
    good, bad = results["tiny_placement"], results["tiny_unresolved"]
    assert good.grade == "resolved" and good.status == "migrated" and good.parity_passed is True
    f2p = "ferry_grading/test_device.py::test_the_model_trains_on_the_accelerator"
    assert good.tests.fail_to_pass == {f2p: "passed"}
    assert set(good.tests.pass_to_pass.values()) == {"passed"}
    assert good.own_run_s and good.ratio and good.ratio == pytest.approx(good.wall_s / good.own_run_s, rel=1e-2)
    assert "FRY002" in good.rules_fired and good.llm_calls == 0 and good.cost_usd == 0.0
    # the same migration, a hidden test no correct migration passes: not resolved, and said why
    assert bad.status == "migrated" and bad.grade == "partial"
    assert "fail-to-pass not passing" in bad.reason and "test_the_module_keeps_a_cuda_string" in bad.reason
    # the agent never saw the grading tests: they are in no patch and in no migrated workspace
    for r in (good, bad):
        patch = Path(r.patch).read_text()
        assert "ferry_grading" not in patch and "grading/" not in patch
        assert not list((Path(r.out_dir) / "state").rglob("ferry_grading"))


def test_the_reports_are_written_with_their_charts(run_dir):
    from evals.report import write_reports

    paths = write_reports(read_results(run_dir), run_dir, "t")
    board = paths["leaderboard"].read_text()
    assert "**1/2 resolved (50%)**" in board and "| `tiny_placement` | easy | **resolved** |" in board
    page = paths["report"].read_text()
    assert page.count("<img alt=") == 4 and page.count("data:image/png;base64,") == 4


def test_regrade_grades_the_saved_patches_again_without_migrating(tmp_path):
    run = tmp_path / "recorded"
    shutil.copytree(RECORDED, run)
    suite = load_suite(SUITE)
    again = {r.name: r for r in regrade(run, suite, tmp_path / "regraded")}
    before = {r.name: r for r in read_results(run)}
    assert {n: r.grade for n, r in again.items()} == {n: r.grade for n, r in before.items()}
    assert not list((tmp_path / "regraded").rglob("checkpoints.sqlite"))  # nothing was migrated
    # grading follows the tests as they are now: break the good case's patch, regrade, it fails
    (run / "tiny_placement" / "ferry.patch").write_text("not a patch\n")
    broken = {r.name: r for r in regrade(run, suite, tmp_path / "regraded2")}
    assert broken["tiny_placement"].grade == "failed" and "patch_does_not_apply" in broken["tiny_placement"].reason


def test_compare_names_what_got_better_or_worse_and_gates_on_regressions(tmp_path):
    a = read_results(RECORDED)
    worse = [r.model_copy(update={"grade": "failed", "status": "needs_llm",
                                  "reason": "x"}) if r.name == "tiny_placement"
             else r for r in a]
    cmp = compare(a, worse)
    assert [c.name for c in cmp.worse] == ["tiny_placement"] and cmp.regressed
    assert cmp.resolved_before == 1 and cmp.resolved_after == 0
    assert not compare(a, a).regressed
    b = tmp_path / "b.jsonl"
    b.write_text("".join(r.model_dump_json() + "\n" for r in worse))
    res = _ferry("eval", "--compare", str(RECORDED), str(b))
    assert res.returncode == 1 and "tiny_placement: resolved -> failed" in res.stdout, res.stdout + res.stderr
    res = _ferry("eval", "--compare", str(RECORDED), str(RECORDED))
    assert res.returncode == 0 and "1 better" not in res.stdout and "0 worse" in res.stdout


def test_a_hanging_case_is_failed_timeout_and_does_not_stop_the_others(tmp_path):
    suite = tmp_path / "suite"
    shutil.copytree(SUITE / "tiny_placement", suite / "tiny_placement")
    shutil.copytree(SUITE / "tiny_placement", suite / "hangs")
    manifest = suite / "hangs" / "ferry-eval.toml"
    manifest.write_text(manifest.read_text().replace('name = "tiny_placement"', 'name = "hangs"')
                        .replace('timeout_s = 300', 'timeout_s = 8')
                        .replace('run = "python train.py --steps 3"',
                                 'run = "python -c \'import time; time.sleep(60)\'"'))
    results = {r.name: r for r in run_suite(load_suite(suite), tmp_path / "out", jobs=2)}
    hangs = results["hangs"]
    assert hangs.grade == "failed"
    # the harness kills it at the case's timeout, or Ferry's own --max-wall (the timeout less a margin) stops
    # the hanging run first (on a loaded machine, start-up alone takes seconds): both name the limit
    if hangs.status == "failed_timeout":
        assert "8 s timeout" in hangs.reason, hangs.reason
    else:
        assert hangs.status == "failed_budget" and "--max-wall" in hangs.reason, (hangs.status, hangs.reason)
    assert results["tiny_placement"].grade == "resolved"


def test_validate_finds_a_fail_to_pass_test_that_cannot_fail():
    res = _ferry("eval", str(SUITE), "--validate")
    assert res.returncode == 1, res.stdout + res.stderr
    assert "tiny_placement: ok" in res.stdout
    assert "tiny_unresolved: fail-to-pass test ferry_grading/test_device.py::test_the_module_keeps_a_cuda_string " \
           "passes on the original code: it cannot fail" in res.stdout


def test_bad_suites_are_clear_errors(tmp_path):
    (tmp_path / "c").mkdir()
    (tmp_path / "c" / "ferry-eval.toml").write_text('name = "c"\nrun = "python x.py"\nexpected_status = "great"\n')
    (tmp_path / "c" / "repo").mkdir()
    with pytest.raises(SuiteError, match=r"expected_status: .*unknown status 'great'"):
        load_suite(tmp_path)
    (tmp_path / "c" / "ferry-eval.toml").write_text(
        'name = "c"\nrun = "python x.py"\n[grading]\nfail_to_pass = ["ferry_grading/test_x.py::test_y"]\n')
    with pytest.raises(SuiteError, match="no grading/ directory"):
        load_suite(tmp_path)
    res = _ferry("eval", str(tmp_path / "nothing-here"))
    assert res.returncode == 2 and "does not exist" in res.stderr and "Traceback" not in res.stderr
    res = _ferry("eval", "--compare", str(tmp_path / "missing"), str(RECORDED))
    assert res.returncode == 2 and "cannot read" in res.stderr
    res = _ferry("eval", "--suite", "real", "--out", str(tmp_path / "o"), "--no-progress")
    assert res.returncode == 2 and "the real suite needs --mirror DIR" in res.stderr, res.stderr
    res = _ferry("eval", "synthetic", "--suite", "real", "--out", str(tmp_path / "o"))
    assert res.returncode == 2 and "two suites given" in res.stderr, res.stderr


def test_costs_come_from_the_price_table():
    prices = Prices.load()
    assert prices.cost("gpt-4o-mini", 1_000_000, 1_000_000) == pytest.approx(0.75)
    assert prices.cost("an-unpriced-model", 10, 10) is None


def test_results_lines_follow_the_schema(run_dir):
    for line in (run_dir / "results.jsonl").read_text().splitlines():
        CaseResult.model_validate(json.loads(line))


def _ray_or_skip() -> None:
    if os.environ.get("CI"):
        import ray  # noqa: F401  (CI installs the dev extra, which has ray: never skipped there)
    else:
        pytest.importorskip("ray", reason="the ray extra is not installed (pip install -e '.[ray]')")


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture
def ray_head(monkeypatch):
    """A Ray head node of its own on loopback (``ray start --head``), stopped after the test. Ray's
    token authentication is off for it (a loopback cluster of the test's own); the driver (this
    process) is told so too."""
    _ray_or_skip()
    ray_bin = Path(sys.executable).parent / "ray"
    tmp = tempfile.mkdtemp(prefix="ray", dir="/tmp")  # short: Ray's unix sockets live under it
    env = {**os.environ, "RAY_USAGE_STATS_ENABLED": "0", "RAY_TMPDIR": tmp, "RAY_AUTH_MODE": "disabled"}
    monkeypatch.setenv("RAY_AUTH_MODE", "disabled")

    def stop() -> None:
        subprocess.run([str(ray_bin), "stop", "--force"], capture_output=True, text=True, timeout=120, env=env)

    try:
        # On a loaded 2-core machine the raylet can miss its 60 s to reach the GCS: one more try
        # from scratch before the test gives up (saying why).
        for _attempt in (1, 2):
            port = _free_port()
            start = subprocess.run([str(ray_bin), "start", "--head", f"--port={port}", "--num-cpus=2",
                                    "--include-dashboard=false", "--disable-usage-stats", f"--temp-dir={tmp}"],
                                   capture_output=True, text=True, timeout=300, env=env)
            if start.returncode == 0:
                break
            stop()
        assert start.returncode == 0, f"ray start failed twice: {start.stdout[-2000:]}{start.stderr[-2000:]}"
        yield f"127.0.0.1:{port}"
    finally:
        stop()
        shutil.rmtree(tmp, ignore_errors=True)


def test_the_ray_path_gives_the_local_results(tmp_path, run_dir, ray_head):
    """Each case a task of a Ray cluster reached at its address on loopback; the same grades as the
    local run, recorded as each finishes."""
    out = tmp_path / "ray"
    results = {r.name: r for r in run_suite(load_suite(SUITE), out, jobs=2, executor=ray_head)}
    local = {r.name: r for r in read_results(run_dir)}
    assert {n: (r.grade, r.status, r.tests) for n, r in results.items()} == \
           {n: (r.grade, r.status, r.tests) for n, r in local.items()}
    assert len((out / "results.jsonl").read_text().splitlines()) == 2


def test_an_unreachable_ray_cluster_is_a_clear_error(tmp_path):
    _ray_or_skip()
    res = _ferry("eval", str(SUITE), "--ray", f"127.0.0.1:{_free_port()}", "--out", str(tmp_path / "o"),
                 "--no-progress", timeout=300)
    assert res.returncode == 2 and "cannot reach the Ray cluster at 127.0.0.1:" in res.stderr, res.stderr[-2000:]
    assert "Traceback" not in res.stderr
