"""report.html read back as HTML (html.parser): its summary, the leaderboard's columns, grade bars as
long as their counts, whole-number axes, relative links to each case's patch and report, and the
comparison with a baseline (or how to get one). Results are built by hand; nothing is migrated."""

from __future__ import annotations

import json
import os
import shutil
from html.parser import HTMLParser
from pathlib import Path

import pytest

from agent.cli import main
from evals import report
from evals.results import CaseResult, GradedTests, read_results

HERE = Path(__file__).resolve().parent
RECORDED = HERE / "recorded"


class Node:
    def __init__(self, tag: str, attrs: dict[str, str | None], parent: Node | None) -> None:
        self.tag, self.attrs, self.parent = tag, attrs, parent
        self.children: list[Node] = []
        self.parts: list[str] = []

    def text(self) -> str:
        return "".join(self.parts) + "".join(c.text() for c in self.children)

    def find_all(self, tag: str | None = None, **attrs: str) -> list[Node]:
        out = [c for c in self.children if (tag is None or c.tag == tag)
               and all(c.attrs.get(k) == v for k, v in attrs.items())]
        for c in self.children:
            out += c.find_all(tag, **attrs)
        return out

    def one(self, tag: str | None = None, **attrs: str) -> Node:
        found = self.find_all(tag, **attrs)
        assert len(found) == 1, (tag, attrs, len(found))
        return found[0]


class Tree(HTMLParser):
    VOID = frozenset({"meta", "img", "br", "hr", "link", "input"})

    def __init__(self, page: str) -> None:
        super().__init__()
        self.root = self.cur = Node("#root", {}, None)
        self.feed(page)
        self.close()

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        node = Node(tag, dict(attrs), self.cur)
        self.cur.children.append(node)
        if tag not in self.VOID:
            self.cur = node

    def handle_endtag(self, tag: str) -> None:
        node: Node | None = self.cur
        while node is not None and node.tag != tag:
            node = node.parent
        if node is not None and node.parent is not None:
            self.cur = node.parent

    def handle_data(self, data: str) -> None:
        self.cur.parts.append(data)


def rows(table: Node) -> list[list[str]]:
    return [[c.text().strip() for c in tr.children if c.tag in ("td", "th")] for tr in table.find_all("tr")]


def result(name: str, grade: str, **fields: object) -> CaseResult:
    base: dict[str, object] = {
        "suite": "s", "name": name, "kind": "synthetic", "expected_status": "migrated",
        "status": "migrated" if grade == "resolved" else "partial", "grade": grade, "out_dir": name,
        "wall_s": 20.0, "own_run_s": 5.0, "ratio": 4.0, "iterations": 1, "runs": 4, "parity_passed": True,
        "llm_calls": 2, "prompt_tokens": 900, "completion_tokens": 100, "cost_usd": 0.04,
        "tests": {"fail_to_pass": {"g::a": "passed" if grade == "resolved" else "failed"},
                  "pass_to_pass": {"t::b": "passed", "t::c": "passed"}}}
    return CaseResult.model_validate({**base, **fields})


@pytest.fixture
def run(tmp_path: Path) -> tuple[Path, list[CaseResult]]:
    out = tmp_path / "run"
    results = [result("alpha", "resolved", ratio=3.0), result("beta", "resolved", iterations=2),
               result("gamma", "partial", parity_passed=None, ratio=None, reason="migrated: fail-to-pass not passing"),
               result("delta", "resolved", ratio=2.0)]
    for r in results:
        (out / r.name).mkdir(parents=True)
        (out / r.name / "ferry.patch").write_text("diff\n")
        (out / r.name / "report.md").write_text("# report\n")
    (out / "results.jsonl").write_text("".join(r.model_dump_json() + "\n" for r in results))
    return out, results


def test_the_report_summarises_tabulates_and_links_each_case(run):
    out, results = run
    page = report.write_reports(results, out, "t")["report"].read_text()
    doc = Tree(page).root
    summary = dict(r for r in rows(doc.one("table", id="summary")) if len(r) == 2)
    assert summary["Resolved"] == "3/4 (75%)" and summary["Partial"] == "1" and summary["Failed"] == "0"
    assert summary["Pass-to-pass regressions"] == "0" and summary["Median migration / own run"] == "3.0x"
    assert summary["LLM cost"] == "$0.1600 (8 calls, 4000 tokens)"
    assert "median_ratio" not in page and "unpriced_cases" not in page  # no raw key: value dump

    # grade bars as long as their counts
    bars = {b.attrs["data-grade"]: b for b in doc.find_all("span", **{"class": "bar"})}
    assert {g: int(b.attrs["data-count"] or 0) for g, b in bars.items()} == {"resolved": 3, "partial": 1, "failed": 0}
    widths = {g: float((b.attrs["style"] or "").split("width:")[1].split("%")[0]) for g, b in bars.items()}
    assert widths["failed"] == 0 and widths["resolved"] == pytest.approx(3 * widths["partial"])

    table = rows(doc.one("table", id="cases"))
    head, body = table[0], {r[0]: dict(zip(table[0], r, strict=True)) for r in table[1:]}
    assert {"f2p", "p2p", "parity", "iter", "runs", "LLM calls", "cost", "patch", "report"} <= set(head)
    assert body["alpha"]["f2p"] == "1/1" and body["alpha"]["p2p"] == "2/2" and body["alpha"]["parity"] == "pass"
    assert body["gamma"]["f2p"] == "0/1" and body["gamma"]["parity"] == "-" and body["gamma"]["ratio"] == "-"
    assert body["gamma"]["status (expected)"] == "partial (migrated)" and body["beta"]["iter"] == "2"

    hrefs = [a.attrs["href"] or "" for a in doc.one("table", id="cases").find_all("a")]
    assert sorted(hrefs) == sorted(f"{r.name}/{f}" for r in results for f in ("ferry.patch", "report.md"))
    assert all(not os.path.isabs(h) and (out / h).is_file() for h in hrefs)

    section = doc.one("section", id="baseline")
    assert "No baseline" in section.text() and "ferry eval --compare" in section.text()


def test_the_report_compares_with_a_baseline(run):
    out, results = run
    earlier = [r.model_copy(update={"wall_s": 5.0} if r.name == "alpha" else {}) for r in results
               if r.name != "delta"]
    earlier.append(result("epsilon", "resolved"))
    now = [r.model_copy(update={"grade": "partial"}) if r.name == "beta" else r for r in results]
    doc = Tree(report.html_report(now, "t", report_dir=out, baseline=earlier, baseline_label="old")).root
    section = doc.one("section", id="baseline")
    changes = {(r[0], r[1]) for r in rows(section.one("table", id="changes"))[1:]}
    assert {("worse", "beta"), ("added", "delta"), ("removed", "epsilon"), ("slower", "alpha")} <= changes
    assert "grade regression" in section.text() and "1 worse" in section.text()
    assert "The 3 cases in both, in sum: wall_s 45.0 s -> 60.0 s" in section.text()
    summary = dict(r for r in rows(doc.one("table", id="summary")) if len(r) == 2)
    assert summary["Grade regressions against the baseline"] == "1"


def test_the_charts_count_in_whole_numbers(run, monkeypatch):
    figures: list[object] = []
    monkeypatch.setattr(report, "_png", lambda fig: figures.append(fig) or "")
    _, results = run
    report.charts([r.model_copy(update={"iterations": 1}) for r in results])
    grades_fig, time_fig = figures[0], figures[1]
    (ax,) = grades_fig.axes  # type: ignore[attr-defined]
    assert sorted(p.get_width() for p in ax.patches) == [0, 1, 3]  # failed, partial, resolved
    _, iterations = time_fig.axes  # type: ignore[attr-defined]
    for axis in (ax, iterations):
        ticks = [t for t in axis.get_xticks() if axis.get_xlim()[0] <= t <= axis.get_xlim()[1]]
        assert ticks and all(float(t).is_integer() for t in ticks), ticks


def test_regrade_reports_against_the_run_it_regraded(tmp_path, monkeypatch, capsys):
    run = tmp_path / "recorded"
    shutil.copytree(RECORDED, run)
    monkeypatch.setattr("evals.regrade.grade_synthetic",
                        lambda case, record, work: ("failed", "migrated: broken now", GradedTests(), None))
    code = main(["eval", str(HERE / "suite"), "--regrade", str(run), "--out", str(tmp_path / "again")])
    out = capsys.readouterr().out
    assert code == 0 and f"against the baseline {run}:" in out and "2 worse" in out, out
    doc = Tree((tmp_path / "again" / "report.html").read_text()).root
    changes = {(r[0], r[1]) for r in rows(doc.one("section", id="baseline").one("table", id="changes"))[1:]}
    assert ("worse", "tiny_placement") in changes
    assert [r.grade for r in read_results(tmp_path / "again")] == ["failed", "failed"]
    # --json carries the comparison too, and --baseline names another run than the one regraded
    other = tmp_path / "other.jsonl"
    other.write_text("".join(r.model_copy(update={"grade": "failed"}).model_dump_json() + "\n"
                             for r in read_results(run)))
    code = main(["eval", str(HERE / "suite"), "--regrade", str(run), "--out", str(tmp_path / "again2"), "--json",
                 "--baseline", str(other)])
    data = json.loads(capsys.readouterr().out)
    assert code == 0 and data["baseline"]["run"] == str(other) and data["baseline"]["worse"] == []
    assert data["baseline"]["exit_code"] == 0


def test_the_ratio_chart_marks_the_target_of_its_suite(run, monkeypatch):
    """2.5x for a synthetic run, 3x as soon as a real case is in it."""
    figures: list[object] = []
    monkeypatch.setattr(report, "_png", lambda fig: figures.append(fig) or "")
    _, results = run
    mixed = [*results, result("real-one", "resolved", kind="real")]
    for cases, target in ((results, 2.5), (mixed, 3.0)):
        figures.clear()
        report.charts(cases)
        (ax,) = figures[-1].axes  # type: ignore[attr-defined]
        assert [line.get_xdata()[0] for line in ax.get_lines()] == [target]
        assert f"median <= {target:g}x" in ax.get_xlabel()
