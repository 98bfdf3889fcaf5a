"""The profiler finds syncs, copies, fallbacks and graph breaks, each tied to the user's line."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from tests.profile import sample_loop
from tools.profile.child import profile_session
from tools.profile.report import ProfileError, build_profile_report

HERE = Path(__file__).resolve().parent
SAMPLE = HERE / "sample_loop.py"


def line_of(marker: str) -> int:
    for i, text in enumerate(SAMPLE.read_text().splitlines(), 1):
        if f"MARK:{marker}" in text:
            return i
    raise AssertionError(marker)


@pytest.fixture
def tpx() -> str:
    try:
        torch.empty(1, device="tpx")
    except (RuntimeError, ImportError) as exc:
        pytest.skip(f"tpx device unavailable: {exc}")
    return "tpx"


def test_syncs_copies_and_fallbacks_on_tpx(tmp_path: Path, tpx: str) -> None:
    with profile_session(tmp_path, HERE, warmup_steps=1, steps=3):
        sample_loop.train(tpx, steps=6)
    report = build_profile_report(tmp_path, HERE)
    by_line = {(f.kind, f.line): f for f in report.findings if f.file == "sample_loop.py"}

    item = by_line[("host_sync", line_of("item"))]
    assert item.count == 6 and ".item()" in item.suggestion and "after the loop" in item.suggestion
    assert item.source == "losses.append(loss.item())  # MARK:item"

    h2d = by_line[("h2d_copy", line_of("h2d"))]
    assert h2d.count == 6 and h2d.severity == "high" and "on the device" in h2d.suggestion
    assert report.h2d_copies_per_step == pytest.approx(1.0)

    nz = by_line[("host_sync", line_of("nonzero"))]
    assert "nonzero" in nz.title and "torch.where" in nz.suggestion

    fallbacks = [f for f in report.findings if f.kind == "cpu_fallback"]
    assert any("nonzero" in f.title for f in fallbacks), report.fallback_ops
    nz_fb = next(f for f in fallbacks if "nonzero" in f.title)
    assert nz_fb.line == line_of("nonzero") and "nonzero_static" in nz_fb.suggestion

    assert report.steps_profiled == 3 and report.top_ops_by_time and report.top_ops_by_count
    assert any(o.source == "tpx" for o in report.top_ops_by_count)
    trace = json.loads(Path(report.trace_path).read_text())
    assert trace["traceEvents"]
    md = Path(report.markdown_path).read_text()
    assert "## Findings" in md and f"sample_loop.py:{line_of('item')}" in md


def test_cpu_tensors_are_not_syncs(tmp_path: Path) -> None:
    with profile_session(tmp_path, HERE, warmup_steps=0, steps=2):
        sample_loop.train("cpu", steps=3)
    report = build_profile_report(tmp_path, HERE)
    assert [f for f in report.findings if f.kind in ("host_sync", "h2d_copy")] == []
    assert report.steps_profiled == 2


def test_graph_breaks_and_recompiles_with_source_lines(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    torch._dynamo.reset()
    with profile_session(tmp_path, HERE, warmup_steps=0, steps=1):
        sample_loop.compiled(steps=3)
    report = build_profile_report(tmp_path, HERE)
    breaks = [f for f in report.findings if f.kind == "graph_break"]
    assert breaks and breaks[0].file == "sample_loop.py" and breaks[0].line == line_of("print")
    assert "print" in breaks[0].suggestion
    assert [f for f in report.findings if f.kind == "recompile"], report.recompiles
    assert capsys.readouterr().out.count("inside") == 3  # the program's own output is untouched


def test_missing_profile_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(ProfileError, match="--profile"):
        build_profile_report(tmp_path, HERE)
