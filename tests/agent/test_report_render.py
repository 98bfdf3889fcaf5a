"""report.md / pr.md from the typed state: the parity table shows the metric values a real `ferry check`
measured, a profile finding renders as `file:line  title`, and a parity with nothing to compare is
reported as such (never as a failure)."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from agent.migration.facade import MigrationSnapshot
from agent.migration.records import MigrationRecord
from agent.migration.render import report_markdown, result_of
from agent.migration.state import MigrationOptions, dump
from agent.prbot.pr.body import pr_body
from tools.parity.check import check
from tools.parity.models import CheckRequest
from tools.textsafe import md_inline

ROOT = Path(__file__).resolve().parents[2]
SAMPLE = ROOT / "tests" / "fixtures" / "placement_mlp"


@pytest.fixture(scope="module")
def checked(tmp_path_factory):
    """A real `ferry check` of a sample (reference on CPU, target on tpx, the target profiled)."""
    out = tmp_path_factory.mktemp("check")
    result = check(CheckRequest(path=SAMPLE, command="python train.py --steps 4", out_dir=out, steps=2))
    assert result.parity is not None and result.parity.compared, result.summary
    assert result.profile is not None and result.profile.findings, result.notes
    return result


def _state(tmp_path: Path, parity, profile) -> dict:
    opts = MigrationOptions(source=str(SAMPLE), run_command="python train.py --steps 4", state_dir=str(tmp_path))
    return {"migration_id": "render-1", "options": dump(opts), "status": "partial", "summary": "s",
            "parity": dump(parity), "profile": dump(profile), "edits": [], "steps": [], "runs": []}


def _cells(markdown: str, key: str) -> list[str]:
    row = next(line for line in markdown.splitlines() if line.startswith(f"| `{key}`"))
    return [c.strip() for c in row.strip("|").split("|")]


def test_parity_table_shows_the_measured_metrics_in_report_and_pr(checked, tmp_path):
    state = _state(tmp_path, checked.parity, checked.profile)
    report = report_markdown(state, "")
    pr = pr_body(MigrationSnapshot(state), result_of(state, []), branch=None, base="main", device="tpx", commits=[],
                 reproduce="ferry pr . --run x")
    with_metrics = [t for t in checked.parity.rows() if t.metrics is not None]
    assert with_metrics, "the check compared no tensor with metrics"
    for text in (report, pr):
        assert "| tensor | cosine | max abs | max rel | tier | verdict |" in text
        for t in with_metrics[:10]:
            cells = _cells(text, t.key)
            assert cells[1:4] == [f"{t.metrics.cosine:.3g}", f"{t.metrics.max_abs:.3g}", f"{t.metrics.max_rel:.3g}"]
            assert cells[4] == t.tier and cells[5] == t.verdict


def test_the_parity_section_leads_with_one_line_then_the_notable_rows_then_the_folded_table(checked, tmp_path):
    state = _state(tmp_path, checked.parity, checked.profile)
    report = report_markdown(state, "")
    section = report.split("## Parity", 1)[1].split("\n## ", 1)[0].strip().splitlines()
    parity = checked.parity
    assert section[0] == f"**{md_inline(parity.headline())}**"
    assert section[0].startswith(f"**parity: {'pass' if parity.verdict == 'pass' else ''}")
    assert f"{len(parity.rows())} tensors" in section[0] and "worst max abs" in section[0]
    if parity.scalars:
        assert "curve within" in section[0]
    folded = section.index(f"<details><summary>All {len(parity.rows())} compared tensors</summary>")
    shown = [line for line in section[:folded] if line.startswith("| `")]
    assert 0 < len(shown) <= max(5, sum(1 for t in parity.rows() if t.verdict in ("fail", "warn")))
    assert section[-1] == "</details>"


def test_a_profile_finding_renders_as_file_line_then_title(checked, tmp_path):
    state = _state(tmp_path, checked.parity, checked.profile)
    report = report_markdown(state, "")
    pr = pr_body(MigrationSnapshot(state), result_of(state, []), branch=None, base="main", device="tpx", commits=[],
                 reproduce="ferry pr . --run x")
    located = [f for f in checked.profile.findings[:15] if f.file and f.line]
    assert located, "the sample's profile has no finding with a source line"
    for f in located:
        line = f"- `{f.file}:{f.line}`  {md_inline(f.title, keep_code=True)} — "
        assert line in report and line in pr, f.title


# no module, no metric printed, nothing saved and no top-level tensor (a top-level one would be
# compared at exit): truly nothing to compare
NOTHING_TO_COMPARE = '''import torch


def main():
    x = torch.ones(4, device="cuda")
    y = (x * 2).sum()
    assert y.item() == 8.0


main()
'''


@pytest.mark.slow
def test_a_parity_with_nothing_to_compare_is_reported_as_such(tmp_path):
    repo = tmp_path / "repo"
    repo.mkdir()
    (repo / "prog.py").write_text(NOTHING_TO_COMPARE)
    proc = subprocess.run([sys.executable, "-m", "agent.cli", "migrate", str(repo), "--run", "python prog.py",
                           "--json", "--state-dir", str(tmp_path / "state"), "--out", str(tmp_path / "out")],
                          cwd=ROOT, capture_output=True, text=True, timeout=600)
    result = MigrationRecord.model_validate_json((tmp_path / "out" / "result.json").read_text())
    assert result.status == "partial", (result.summary, proc.stderr[-2000:])
    assert result.parity.verdict == "skipped" and result.parity.passed is None
    assert "could not be shown" in (result.summary or "") and "fail" not in (result.summary or "")
    report = (tmp_path / "out" / "report.md").read_text()
    assert "nothing to compare" in report and "Verdict: **fail" not in report
    assert json.loads((tmp_path / "out" / "result.json").read_text())["parity"]["passed"] is None
    shutil.rmtree(tmp_path / "state", ignore_errors=True)
