"""An eval run's leaderboard (Markdown) and report (HTML with charts), from its results.jsonl.

Charts (matplotlib, embedded as PNG data): the grade of each case, wall time and iterations per
case, the rules fired over the suite, and each case's migration time over its own run. Case
names, reasons and rule names are escaped where they land (a case's text is the repository's).
"""

from __future__ import annotations

import base64
import io
import statistics
from collections import Counter
from pathlib import Path

from evals.results import CaseResult
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
             "| case | difficulty | grade | status (expected) | f2p | p2p | parity | iter | runs | LLM calls "
             "| cost | wall s | ratio | reason |", "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in results:
        f2p = f"{sum(o == 'passed' for o in r.tests.fail_to_pass.values())}/{len(r.tests.fail_to_pass)}"
        p2p = f"{sum(o == 'passed' for o in r.tests.pass_to_pass.values())}/{len(r.tests.pass_to_pass)}"
        parity = {True: "pass", False: "fail", None: "-"}[r.parity_passed]
        lines.append(f"| {md_code(r.name, table=True)} | {r.difficulty} | **{r.grade}** | {r.status} "
                     f"({r.expected_status}) | {f2p} | {p2p} | {parity} | {r.iterations} | {r.runs} | {r.llm_calls} | "
                     f"{_cost(r)} | {r.wall_s:.1f} | {f'{r.ratio:.2f}x' if r.ratio else '-'} | "
                     f"{md_inline(r.reason[:300], keep_code=True, table=True)} |")
    return "\n".join(lines) + "\n"


def _png(fig: object) -> str:
    import matplotlib.pyplot as plt

    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=90, bbox_inches="tight")  # type: ignore[attr-defined]
    plt.close(fig)  # type: ignore[arg-type]
    return base64.b64encode(buf.getvalue()).decode()


def charts(results: list[CaseResult]) -> dict[str, str]:
    """Title -> PNG (base64) of each chart."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = [r.name for r in results]
    h = max(2.5, 0.32 * len(results) + 1)
    out: dict[str, str] = {}

    fig, ax = plt.subplots(figsize=(7, h))
    ax.barh(names, [1] * len(results), color=[GRADE_COLOURS[r.grade] for r in results])
    for i, r in enumerate(results):
        ax.text(0.02, i, f"{r.grade} ({r.status})", va="center", color="white", fontsize=8)
    ax.set_xticks([])
    ax.invert_yaxis()
    ax.set_title("grade per case")
    out["Grade per case"] = _png(fig)

    fig, (a1, a2) = plt.subplots(1, 2, figsize=(10, h), sharey=True)
    a1.barh(names, [r.wall_s for r in results], color="#1565c0")
    a1.set_xlabel("migration wall time (s)")
    a2.barh(names, [r.iterations for r in results], color="#6a1b9a")
    a2.set_xlabel("fix iterations")
    a1.invert_yaxis()
    out["Time and iterations per case"] = _png(fig)

    fired = Counter(rule for r in results for rule in r.rules_fired).most_common(25)
    fig, ax = plt.subplots(figsize=(7, max(2.5, 0.3 * len(fired) + 1)))
    if fired:
        ax.barh([f for f, _ in fired], [n for _, n in fired], color="#00838f")
        ax.invert_yaxis()
    ax.set_xlabel("times fired over the suite")
    ax.set_title("rules fired")
    out["Rules fired"] = _png(fig)

    fig, ax = plt.subplots(figsize=(7, h))
    ax.barh(names, [r.ratio or 0 for r in results], color="#ef6c00")
    ax.axvline(3.0, color="black", linestyle="--", linewidth=1)
    ax.set_xlabel("migration wall time / the case's own run (target: median < 3x)")
    ax.invert_yaxis()
    out["Ratio to the case's own run"] = _png(fig)
    return out


def html_report(results: list[CaseResult], title: str = "Ferry eval") -> str:
    t = totals(results)
    rows = "".join(
        f"<tr><td><code>{html(r.name)}</code></td><td>{html(r.difficulty)}</td>"
        f"<td style='color:{GRADE_COLOURS[r.grade]}'><b>{html(r.grade)}</b></td><td>{html(r.status)}</td>"
        f"<td>{html(r.expected_status)}</td><td>{r.iterations}</td><td>{r.wall_s:.1f}</td>"
        f"<td>{f'{r.ratio:.2f}x' if r.ratio else '-'}</td><td>{html(r.reason[:500])}</td></tr>" for r in results)
    imgs = "".join(f"<h2>{html(name)}</h2><img alt='{html(name)}' src='data:image/png;base64,{png}'>"
                   for name, png in charts(results).items())
    summary = ", ".join(f"{html(str(k))}: {html(str(v))}" for k, v in t.items())
    return ("<!doctype html><html><head><meta charset='utf-8'><title>" + html(title) + "</title>"
            "<style>body{font-family:sans-serif;margin:2em}table{border-collapse:collapse}"
            "td,th{border:1px solid #ccc;padding:4px 8px;font-size:13px}img{max-width:100%}</style></head><body>"
            f"<h1>{html(title)}</h1><p>{summary}</p><table><tr><th>case</th><th>difficulty</th><th>grade</th>"
            f"<th>status</th><th>expected</th><th>iterations</th><th>wall s</th><th>ratio</th><th>reason</th></tr>"
            f"{rows}</table>{imgs}</body></html>\n")


def write_reports(results: list[CaseResult], out_dir: Path, title: str = "Ferry eval") -> dict[str, Path]:
    out = {"leaderboard": out_dir / "leaderboard.md", "report": out_dir / "report.html"}
    out["leaderboard"].write_text(leaderboard(results, title), encoding="utf-8")
    out["report"].write_text(html_report(results, title), encoding="utf-8")
    return out
