"""pr.md as the repository's readers see it: the same result gives the same text (no timings), paths
repository-relative (never a sandbox's or a worktree's), Ferry's own docs cited (never its design
documents), tpx's own op count said in words, and a Reproduce line without this machine's paths."""

from __future__ import annotations

from agent.migration.facade import MigrationSnapshot
from agent.migration.records import CpuCheck, DeviceWork, RunRecord
from agent.migration.render import result_of
from agent.migration.state import MigrationOptions, dump
from agent.prbot.pr.body import pr_body
from agent.prbot.pr.core import _reproduce
from agent.prbot.pr.models import PrRequest
from agent.prbot.pr.public import public_text, rule_doc

SANDBOX = "/tmp/ferry-space-25675-1263598-n4026531836-9eec3cb8/ws/ferry-ws-dxbrj528/app"
WORKTREE = "/tmp/ferry-pr-wt-k2j_9x/repo"


def _state(seconds: float) -> dict:
    """A finished migration of the directory app/ whose run-derived texts quote the sandbox's paths;
    ``seconds``: how long its runs took (all that differs between two runs with the same result)."""
    opts = MigrationOptions(source=f"{WORKTREE}/app", run_command="python prog.py", test_command="pytest -q",
                            state_dir="/state")
    check = CpuCheck(verdict="not_applicable", passed=None, run_status="failed", duration_s=seconds,
                     reason=f"the original does not run on CPU either (failed (exit 1): {SANDBOX}/data.py needs "
                            "a CUDA GPU)")
    run = RunRecord(kind="tests", command=["pytest"], status="ok", exit_code=0, duration_s=seconds * 2,
                    isolation="bwrap", tests={"passed": 3, "skipped": 1})
    work = DeviceWork(tpx_ops=90, total_ops=100, tpx_share=0.9, scope="through_window", run_tpx_ops=307)
    return {"migration_id": "m1", "options": dump(opts), "status": "needs_human", "elapsed_s": seconds * 10,
            "summary": f"the target run failed at {SANDBOX}/model.py:3 (see docs/numerics.md); "
                       f"the worktree {WORKTREE}/app/prog.py is fine",
            "cpu_check": dump(check), "device_work": dump(work), "runs": [dump(run)], "edits": [], "steps": []}


def _body(seconds: float) -> str:
    state = _state(seconds)
    return pr_body(MigrationSnapshot(state), result_of(state, []), branch=None, base="main", device="tpx", commits=[],
                   reproduce="ferry pr app --base main --run 'python prog.py'", directory="app")


def test_the_same_result_gives_the_same_text_whatever_the_runs_took():
    assert _body(0.5) == _body(41.25)
    assert "Verdict: **not applicable** (failed): " in _body(0.5)


def test_run_paths_become_repository_relative():
    text = _body(1.0)
    assert "the target run failed at app/model.py:3 (see docs/numerics.md); " \
           "the worktree app/prog.py is fine" in text
    assert "app/data.py needs a CUDA GPU" in text
    assert "Ferry migrated the directory `app/`" in text
    for leak in ("/tmp/", "ferry-ws-", "ferry-pr-wt-", "ferry-space-", "CUDA_IDIOMS", "NUMERICS.md"):
        assert leak not in text, leak
    assert "aten ops tpx itself executed over the whole run, set-up and teardown included (its own counter, " \
           "not the profiler's): 307" in text


def test_public_text_maps_each_kind_of_run_path():
    assert public_text(f"{SANDBOX}/a.py and {SANDBOX}", "") == "a.py and ."
    assert public_text(f"{SANDBOX}/sub/a.py:3", "app") == "app/sub/a.py:3"
    assert public_text(f"'{WORKTREE}/app/a.py'", "app") == "'app/a.py'"
    kept = "/home/me/data/train.csv and ./ferry-ws-notes.txt"
    assert public_text(kept, "app") == kept
    assert rule_doc("FRY013") == "docs/idioms.md#fry013" and rule_doc("float64_to_float32") is None


def test_the_reproduce_line_names_the_repository_directory_and_no_path_of_this_machine():
    req = PrRequest(path="/home/me/src/repo/app", run_command="python prog.py --steps 8", test_command="pytest -q",
                    out_dir="/tmp/out", state_dir="/tmp/state", push_remote="origin", device="tpx",
                    skip_rules=["FRY013", "float64_to_float32"], python="/home/me/venv/bin/python",
                    env={"PYTHONPATH": "."}, cwd="examples")
    line = _reproduce(req, "main", "app")
    assert line.splitlines()[-1] == (
        "ferry pr app --base main --run 'python prog.py --steps 8' --test 'pytest -q' --push origin --device tpx "
        "--skip-rule FRY013 --skip-rule float64_to_float32 --env PYTHONPATH=. --cwd examples")
    assert line.startswith("# in a virtualenv with the repository's dependencies")
    for local in ("/tmp/", "/home/me", "--json", "--out", "--state-dir"):
        assert local not in line
    assert _reproduce(PrRequest(path="/r", run_command="python x.py"), "main", "") == \
        "ferry pr . --base main --run 'python x.py'"


def _parity(n: int):
    from tools.parity.models import ParityReport, TensorComparison
    from tools.parity.verdicts import TensorMetrics

    rows = [TensorComparison(key=f"Linear#{i}:out", kind="output", verdict="pass", tier="assert_close", reason="ok",
                             metrics=TensorMetrics(numel=4, max_abs=i * 1e-7, max_rel=0.0, cosine=1.0, rmse=0.0,
                                                   nonfinite_mismatch=0, assert_close_ok=True))
            for i in range(n)]
    return ParityReport(verdict="pass", summary="parity pass", ref_dir="/r", target_dir="/t",
                        counts={"pass": n, "compared": n}, modules=[], tensors=rows, scalars=[])


def test_the_parity_section_shows_one_line_the_worst_rows_and_folds_the_rest():
    from agent.migration.render import parity_section

    many = parity_section(_parity(29))
    assert many[0].startswith("**parity: pass, 29 tensors, worst max abs 2.8e-06 at Linear#28:out")
    assert sum(1 for line in many[:many.index("<details><summary>All 29 compared tensors</summary>")]
               if line.startswith("| `")) == 5
    few = parity_section(_parity(3))  # the worst rows are all of them: nothing to fold
    assert sum(1 for line in few if line.startswith("| `")) == 3 and not any("<details>" in line for line in few)
