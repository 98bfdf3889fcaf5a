"""An eval run's leaderboard (Markdown) and report (HTML with charts), from its results.jsonl.

The report: a summary (resolved, partial, failed, regressions, median ratio, LLM cost, bars as long
as each grade's count), the leaderboard's table with links to each case's patch and report, the
comparison with a baseline run (or how to get one), and charts (matplotlib, embedded as PNG data):
cases per grade, wall time and iterations per case, the rules fired over the suite, and each case's
migration time over its own run. Case
names, reasons and rule names are escaped where they land (a case's text is the repository's).
"""

from __future__ import annotations

import base64
import io
import os
import statistics
from collections import Counter
from collections.abc import Mapping
from pathlib import Path
from urllib.parse import quote

from evals.cases import slug
from evals.compare import (
    EXIT_COST_REGRESSION,
    EXIT_GRADE_REGRESSION,
    EXIT_SAME,
    Comparison,
    compare,
    summary_line,
    sums_line,
)
from evals.results import CaseResult, repo_tests_text
from tools.textsafe import html, md_code, md_inline

GRADE_COLOURS = {"resolved": "#2e7d32", "partial": "#f9a825", "failed": "#c62828"}


def totals(results: list[CaseResult]) -> dict[str, float | int | None]:
    n = len(results)
    ratios = [r.ratio for r in results if r.ratio is not None]
    costs = [r.cost_usd for r in results if r.cost_usd is not None]
    unpriced = sum(1 for r in results if r.cost_usd is None and r.llm_calls)
    return {
        "cases": n,
        "resolved": sum(r.resolved for r in results),
        "partial": sum(r.grade == "partial" for r in results),
        "failed": sum(r.grade == "failed" for r in results),
        "as_expected": sum(r.as_expected for r in results),
        "p2p_regressions": sum(1 for r in results for o in r.tests.pass_to_pass.values() if o != "passed"),
        "median_ratio": round(statistics.median(ratios), 2) if ratios else None,
        "iterations": sum(r.iterations for r in results),
        "llm_calls": sum(r.llm_calls for r in results),
        "tokens": sum(r.prompt_tokens + r.completion_tokens for r in results),
        # a total over cases of which some have no price would understate: unknown, never a guess
        "cost_usd": round(sum(costs), 4) if costs and not unpriced else None,
        "unpriced_cases": unpriced,
        "wall_s": round(sum(r.wall_s for r in results), 1),
    }


SYNTHETIC_RATIO_TARGET = 2.5  # the suite's median wall time / own run (docs/evals.md, "Wall time")
REAL_RATIO_TARGET = 3.0


def ratio_target(results: list[CaseResult]) -> float:
    """The median ratio a run of these cases is held to: the synthetic suite's where every case is
    synthetic, else the real suite's (its cases bring their own environments and longer start-ups)."""
    if results and all(r.kind == "synthetic" for r in results):
        return SYNTHETIC_RATIO_TARGET
    return REAL_RATIO_TARGET


def node_medians(results: list[CaseResult]) -> dict[str, float]:
    """Suite-wide median seconds per node, over the cases whose migration ran that node; slowest first."""
    per: dict[str, list[float]] = {}
    for r in results:
        for node, sec in r.node_s.items():
            per.setdefault(node, []).append(sec)
    meds = {node: round(statistics.median(secs), 2) for node, secs in per.items()}
    return dict(sorted(meds.items(), key=lambda kv: -kv[1]))


def _split(times: Mapping[str, float]) -> str:
    """``node 1.2 s, other 0.4 s`` slowest first ('-' when none were recorded)."""
    ordered = sorted(times.items(), key=lambda kv: -kv[1])
    return ", ".join(f"{k} {v:.1f} s" for k, v in ordered) or "-"


def time_went(results: list[CaseResult]) -> str:
    """The leaderboard's "where the time went": per case its wall time, its own run, the nodes' and the
    runs' seconds, then the suite-wide median per node."""
    lines = ["## Where the time went", "",
             "| case | wall s | own run s | ratio | nodes (s) | runs by role (s) |", "|---|---|---|---|---|---|"]
    for r in results:
        own = f"{r.own_run_s:.1f}" if r.own_run_s else "-"
        lines.append(f"| {md_code(r.name, table=True)} | {r.wall_s:.1f} | {own} | "
                     f"{f'{r.ratio:.2f}x' if r.ratio else '-'} | {_split(r.node_s)} | {_split(r.run_s)} |")
    meds = node_medians(results)
    if meds:
        lines += ["", "Median seconds per node over the cases that ran it: "
                  + ", ".join(f"{k} {v:.2f}" for k, v in meds.items()) + "."]
    return "\n".join(lines) + "\n"


def _cost(r: CaseResult) -> str:
    if r.cost_usd is not None:
        return f"${r.cost_usd:.4f}"
    return "unknown" if r.llm_calls else "-"


def _pct(part: int, whole: int) -> str:
    return f"{100 * part / whole:.0f}%" if whole else "-"


def leaderboard(results: list[CaseResult], title: str = "Ferry eval") -> str:
    t = totals(results)
    cases, resolved = int(t["cases"] or 0), int(t["resolved"] or 0)
    ratio = f"{t['median_ratio']}x" if t["median_ratio"] is not None else "-"
    cost = (f"${t['cost_usd']:.4f}" if t["cost_usd"] is not None
            else f"unknown ({t['unpriced_cases']} cases' model has no price)" if t["unpriced_cases"] else "n/a")
    lines = [f"# {md_inline(title)}", "",
             f"**{resolved}/{cases} resolved ({_pct(resolved, cases)})**, {t['partial']} partial, "
             f"{t['failed']} failed; {t['as_expected']}/{cases} ended with their expected status; "
             f"{t['p2p_regressions']} pass-to-pass regressions; median migration / own run: {ratio}; "
             f"LLM calls {t['llm_calls']}, tokens {t['tokens']}, cost {cost}; wall {t['wall_s']} s.", "",
             "| case | difficulty | grade | status (expected) | f2p | p2p | repo tests before -> after | parity | iter "
             "| runs | LLM calls | cost | wall s | ratio | reason |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in results:
        f2p = f"{sum(o == 'passed' for o in r.tests.fail_to_pass.values())}/{len(r.tests.fail_to_pass)}"
        p2p = f"{sum(o == 'passed' for o in r.tests.pass_to_pass.values())}/{len(r.tests.pass_to_pass)}"
        parity = {True: "pass", False: "fail", None: "-"}[r.parity_passed]
        lines.append(f"| {md_code(r.name, table=True)} | {r.difficulty} | **{r.grade}** | {r.status} "
                     f"({r.expected_status}) | {f2p} | {p2p} | {repo_tests_text(r.tests_before, r.tests_after)} | "
                     f"{parity} | {r.iterations} | {r.runs} | {r.llm_calls} | "
                     f"{_cost(r)} | {r.wall_s:.1f} | {f'{r.ratio:.2f}x' if r.ratio else '-'} | "
                     f"{md_inline(r.reason[:300], keep_code=True, table=True)} |")
    return "\n".join(lines) + "\n\n" + time_went(results)


def _png(fig: object) -> str:
    import matplotlib.pyplot as plt

    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=90, bbox_inches="tight")  # type: ignore[attr-defined]
    plt.close(fig)  # type: ignore[arg-type]
    return base64.b64encode(buf.getvalue()).decode()


def grade_counts(results: list[CaseResult]) -> dict[str, int]:
    return {g: sum(r.grade == g for r in results) for g in GRADE_COLOURS}


def charts(results: list[CaseResult]) -> dict[str, str]:
    """Title -> PNG (base64) of each chart."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import MaxNLocator

    names = [r.name for r in results]
    h = max(2.5, 0.32 * len(results) + 1)
    out: dict[str, str] = {}

    counts = grade_counts(results)
    fig, ax = plt.subplots(figsize=(7, 2.2))
    ax.barh(list(counts), list(counts.values()), color=[GRADE_COLOURS[g] for g in counts])
    for i, n in enumerate(counts.values()):
        ax.text(n, i, f" {n}", va="center", fontsize=9)
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_xlim(0, max(1, len(results)))
    ax.invert_yaxis()
    ax.set_xlabel("cases")
    ax.set_title("cases per grade")
    out["Cases per grade"] = _png(fig)

    fig, (a1, a2) = plt.subplots(1, 2, figsize=(10, h), sharey=True)
    a1.barh(names, [r.wall_s for r in results], color="#1565c0")
    a1.set_xlabel("migration wall time (s)")
    a2.barh(names, [r.iterations for r in results], color="#6a1b9a")
    a2.set_xlabel("fix iterations")
    a2.xaxis.set_major_locator(MaxNLocator(integer=True))
    a2.set_xlim(0, max([1, *(r.iterations for r in results)]))
    a1.invert_yaxis()
    out["Time and iterations per case"] = _png(fig)

    fired = Counter(rule for r in results for rule in r.rules_fired).most_common(25)
    fig, ax = plt.subplots(figsize=(7, max(2.5, 0.3 * len(fired) + 1)))
    if fired:
        ax.barh([f for f, _ in fired], [n for _, n in fired], color="#00838f")
        ax.invert_yaxis()
    else:
        ax.set_yticks([])
        ax.text(0.5, 0.5, "no rule fired", ha="center", va="center", transform=ax.transAxes)
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_xlabel("times fired over the suite")
    ax.set_title("rules fired")
    out["Rules fired"] = _png(fig)

    fig, ax = plt.subplots(figsize=(7, h))
    ax.barh(names, [r.ratio or 0 for r in results], color="#ef6c00")
    target = ratio_target(results)
    ax.axvline(target, color="black", linestyle="--", linewidth=1)
    ax.set_xlabel(f"migration wall time / the case's own run (target: median <= {target:g}x)")
    ax.invert_yaxis()
    out["Ratio to the case's own run"] = _png(fig)
    return out


def _case_dir(r: CaseResult, report_dir: Path) -> Path:
    """Where the case's outputs are: its recorded out_dir, else ``<report_dir>/<slug>`` (a moved run)."""
    d = Path(r.out_dir)
    if not d.is_absolute():
        d = report_dir / d
    return d if d.is_dir() else report_dir / slug(r.name)


def _link(target: Path, report_dir: Path, text: str) -> str:
    if not target.is_file():
        return "-"
    rel = os.path.relpath(target, report_dir).replace(os.sep, "/")
    return f"<a href='{html(quote(rel))}'>{html(text)}</a>"


def _outcomes(tests: Mapping[str, str]) -> str:
    return f"{sum(o == 'passed' for o in tests.values())}/{len(tests)}"


def _summary(results: list[CaseResult], cmp: Comparison | None) -> str:
    t = totals(results)
    cases, resolved = int(t["cases"] or 0), int(t["resolved"] or 0)
    cost = (f"${t['cost_usd']:.4f}" if t["cost_usd"] is not None
            else f"unknown ({t['unpriced_cases']} cases' model has no price)" if t["unpriced_cases"] else "n/a")
    rows = [("Resolved", f"{resolved}/{cases} ({_pct(resolved, cases)})"),
            ("Partial", str(t["partial"])), ("Failed", str(t["failed"])),
            ("Ended with the expected status", f"{t['as_expected']}/{cases}"),
            ("Pass-to-pass regressions", str(t["p2p_regressions"]))]
    if cmp is not None:
        rows.append(("Grade regressions against the baseline", str(len(cmp.worse))))
    rows += [("Median migration / own run", f"{t['median_ratio']}x" if t["median_ratio"] is not None else "-"),
             ("LLM cost", f"{cost} ({t['llm_calls']} calls, {t['tokens']} tokens)"),
             ("Migration wall time, all cases", f"{t['wall_s']} s")]
    table = "".join(f"<tr><th>{html(k)}</th><td>{html(v)}</td></tr>" for k, v in rows)
    counts = grade_counts(results)
    most = max([1, *counts.values()])
    bars = "".join(
        f"<div class='row'><span class='label'>{g}</span><span class='bar' data-grade='{g}' data-count='{n}' "
        f"style='width:{60 * n / most:.1f}%;background:{GRADE_COLOURS[g]}'></span> {n}</div>"
        for g, n in counts.items())
    return f"<table id='summary'>{table}</table><div id='grades'>{bars}</div>"


def _cases_table(results: list[CaseResult], report_dir: Path) -> str:
    head = ("case", "difficulty", "grade", "status (expected)", "f2p", "p2p", "repo tests before -> after", "parity",
            "iter", "runs",
            "LLM calls", "cost", "wall s", "ratio", "patch", "report", "reason")
    rows = []
    for r in results:
        d = _case_dir(r, report_dir)
        patch = Path(r.patch) if r.patch else d / "ferry.patch"
        if not patch.is_absolute():
            patch = report_dir / patch
        if not patch.is_file():
            patch = d / "ferry.patch"
        parity = {True: "pass", False: "fail", None: "-"}[r.parity_passed]
        cells = [f"<code>{html(r.name)}</code>", html(r.difficulty),
                 f"<b style='color:{GRADE_COLOURS[r.grade]}'>{html(r.grade)}</b>",
                 f"{html(r.status)} ({html(r.expected_status)})", _outcomes(r.tests.fail_to_pass),
                 _outcomes(r.tests.pass_to_pass), html(repo_tests_text(r.tests_before, r.tests_after)), parity,
                 str(r.iterations), str(r.runs), str(r.llm_calls),
                 html(_cost(r)), f"{r.wall_s:.1f}", f"{r.ratio:.2f}x" if r.ratio else "-",
                 _link(patch, report_dir, "ferry.patch"), _link(d / "report.md", report_dir, "report.md"),
                 html(r.reason[:500])]
        rows.append("<tr>" + "".join(f"<td>{c}</td>" for c in cells) + "</tr>")
    return ("<table id='cases'><tr>" + "".join(f"<th>{html(h)}</th>" for h in head) + "</tr>" + "".join(rows)
            + "</table>")


def _time_table(results: list[CaseResult]) -> str:
    rows = "".join(f"<tr><td><code>{html(r.name)}</code></td><td>{r.wall_s:.1f}</td>"
                   f"<td>{f'{r.own_run_s:.1f}' if r.own_run_s else '-'}</td>"
                   f"<td>{f'{r.ratio:.2f}x' if r.ratio else '-'}</td><td>{html(_split(r.node_s))}</td>"
                   f"<td>{html(_split(r.run_s))}</td></tr>" for r in results)
    meds = node_medians(results)
    med = ("<p>Median seconds per node over the cases that ran it: "
           + html(", ".join(f"{k} {v:.2f}" for k, v in meds.items())) + ".</p>") if meds else ""
    return ("<section id='time'><h2>Where the time went</h2><table><tr><th>case</th><th>wall s</th>"
            "<th>own run s</th><th>ratio</th><th>nodes (s)</th><th>runs by role (s)</th></tr>"
            f"{rows}</table>{med}</section>")


def _baseline(cmp: Comparison | None, label: str | None) -> str:
    if cmp is None:
        return ("<section id='baseline'><h2>Baseline</h2><p>No baseline given. Compare this run with an earlier "
                "one: <code>ferry eval --compare EARLIER_DIR THIS_DIR</code>, or run with "
                "<code>--baseline EARLIER_DIR</code> to have the comparison here (docs/evals.md, "
                "\"Comparing runs\").</p></section>")
    rows = "".join(f"<tr><td>{html(c.kind)}</td><td><code>{html(c.name)}</code></td><td>{html(c.before or '-')}"
                   f"</td><td>{html(c.after or '-')}</td><td>{html(c.detail)}</td></tr>"
                   for c in cmp.changes if c.kind != "same" or c.detail)
    rows += "".join(f"<tr><td>p2p regression</td><td colspan='4'>{html(p)}</td></tr>" for p in cmp.p2p_regressions)
    rows += "".join(f"<tr><td>{'slower' if m.worse else 'faster'}</td><td><code>{html(m.name)}</code></td>"
                    f"<td colspan='3'>{html(m.render())}</td></tr>" for m in cmp.metrics)
    verdict = {EXIT_SAME: "no regression", EXIT_GRADE_REGRESSION: "grade regression",
               EXIT_COST_REGRESSION: "no grade regression; time or cost regressed beyond the thresholds"}
    table = ("<table id='changes'><tr><th>change</th><th>case</th><th>before</th><th>after</th><th>detail</th></tr>"
             f"{rows}</table>") if rows else "<p>No case changed.</p>"
    return (f"<section id='baseline'><h2>Compared with the baseline {html(label or '')}</h2>"
            f"<p>{html(summary_line(cmp, 'baseline', 'this run'))}.</p>"
            f"<p>The {cmp.common} cases in both, in sum: {html(sums_line(cmp))}.</p>"
            f"<p><b>{html(verdict[cmp.exit_code])}</b></p>{table}</section>")


def html_report(results: list[CaseResult], title: str = "Ferry eval", *, report_dir: Path | None = None,
                baseline: list[CaseResult] | None = None, baseline_label: str | None = None) -> str:
    """The report: a summary, the cases' table (links relative to ``report_dir``, where report.html
    goes), the comparison with ``baseline`` (an earlier run's results) or how to get one, the charts."""
    report_dir = report_dir or Path.cwd()
    cmp = compare(baseline, results) if baseline is not None else None
    imgs = "".join(f"<h2>{html(name)}</h2><img alt='{html(name)}' src='data:image/png;base64,{png}'>"
                   for name, png in charts(results).items())
    return ("<!doctype html><html><head><meta charset='utf-8'><title>" + html(title) + "</title>"
            "<style>body{font-family:sans-serif;margin:2em}table{border-collapse:collapse;margin-bottom:1em}"
            "td,th{border:1px solid #ccc;padding:4px 8px;font-size:13px;text-align:left}img{max-width:100%}"
            "#grades .row{margin:2px 0}#grades .label{display:inline-block;width:6em}"
            "#grades .bar{display:inline-block;height:1em;vertical-align:middle}</style></head><body>"
            f"<h1>{html(title)}</h1>{_summary(results, cmp)}<h2>Cases</h2>{_cases_table(results, report_dir)}"
            f"{_time_table(results)}"
            f"{_baseline(cmp, baseline_label)}{imgs}</body></html>\n")


def write_reports(results: list[CaseResult], out_dir: Path, title: str = "Ferry eval", *,
                  baseline: list[CaseResult] | None = None, baseline_label: str | None = None) -> dict[str, Path]:
    out = {"leaderboard": out_dir / "leaderboard.md", "report": out_dir / "report.html"}
    out["leaderboard"].write_text(leaderboard(results, title), encoding="utf-8")
    out["report"].write_text(html_report(results, title, report_dir=out_dir, baseline=baseline,
                                         baseline_label=baseline_label), encoding="utf-8")
    return out
