"""Human outputs of a parity check: text summary, Markdown report, PNG chart (matplotlib, Agg).

Module keys and classes, op names, dtypes and messages come from the runs' probe dumps: each is
escaped where it lands (tools.textsafe for Markdown and the terminal; ``$`` for matplotlib, which
would otherwise parse it as mathtext).
"""

from __future__ import annotations

from pathlib import Path

from tools.parity.models import CheckResult, GradientDivergence, ParityReport, TensorComparison
from tools.parity.tolerances import tolerance_table
from tools.textsafe import md_code, md_inline, terminal

VERDICT_COLOURS = {"pass": "#2e7d32", "warn": "#f9a825", "fail": "#c62828", "skipped": "#9e9e9e", "none": "#9e9e9e"}


def _fmt(x: float | None) -> str:
    if x is None:
        return "-"
    if x == 0:
        return "0"
    return f"{x:.3g}"


def _tol(t: TensorComparison) -> str:
    if t.tolerances is None:
        return "-"
    tol = t.tolerances
    return f"{tol.dtype}: rtol={tol.rtol:g} atol={tol.atol:g} floor={tol.floor:g}"


def summary_text(parity: ParityReport, max_rows: int = 5) -> str:
    lines = [parity.summary]
    div = parity.first_divergence
    if div is not None:
        o = div.output
        lines.append(f"  first divergence: {div.key} [{div.module_class or '?'}] step {div.step} — likely cause: "
                     f"{div.likely_cause}")
        lines.append(f"    {div.explanation}")
        if o.metrics is not None:
            m = o.metrics
            lines.append(f"    max abs {_fmt(m.max_abs)}, max rel {_fmt(m.max_rel)}, cosine {m.cosine:.6f}, "
                         f"rmse {_fmt(m.rmse)}; decided by {o.tier} ({_tol(o)})")
        else:
            lines.append(f"    {o.reason}")
    for label, found in _gradient_findings(parity):
        lines.append(f"  {label}: {found.describe()}, module {found.module}")
    differing = [t for t in parity.tensors + parity.scalars
                 if t.verdict in ("fail", "warn") and t.kind != "module_input"]
    failing = differing[:max_rows]
    if failing:
        more = f" (of {len(differing)}; all in the JSON/Markdown reports)" if len(differing) > max_rows else ""
        lines.append(f"  first differing outputs{more}:")
        for t in failing:
            lines.append(f"    {t.verdict:4} {t.key}: {t.reason} [{t.tier}; {_tol(t)}]")
    for s in parity.scalars:
        if s.verdict == "pass":
            lines.append(f"  scalar {s.key}: pass by {s.tier} ({_tol(s)})")
    lines += [f"  note: {n}" for n in parity.notes]
    return "\n".join(lines)


def _gradient_findings(parity: ParityReport) -> list[tuple[str, GradientDivergence]]:
    found = [("first divergent gradient", parity.first_divergent_gradient),
             ("first divergent optimizer update (gradients match)", parity.first_divergent_update)]
    return [(label, f) for label, f in found if f is not None]


def _gradient_markdown(p: ParityReport) -> list[str]:
    """The first divergent gradient or optimizer update, and the ranks' gradients of a distributed run."""
    out: list[str] = []
    for label, f in _gradient_findings(p):
        c = f.comparison
        out += ["", f"## {label[0].upper()}{label[1:]}", "",
                f"- parameter: {md_code(f.param)} (module {md_code(f.module)}), optimizer step {f.step}"
                + (f", rank {f.rank}" if f.rank else ""),
                f"- tensor: {md_code(c.key)}; {f.failing} tensor(s) of this kind fail in that step",
                f"- verdict: {c.verdict} by {c.tier}: {md_inline(c.reason)}",
                f"- tolerances: {_tol(c)}"]
    if p.gradient_ranks:
        out += ["", "| rank | gradients and optimizer state compared | failing | first divergent |",
                "|---:|---:|---:|---|"]
        out += [f"| {r.rank} | {r.compared} | {r.failing} | {md_inline(r.first or '-', table=True)} |"
                for r in p.gradient_ranks]
    return out


def markdown_report(result: CheckResult) -> str:
    p = result.parity
    out = ["# Ferry check: numeric parity", "", f"**Status: {result.status}** — {md_inline(result.summary)}", ""]
    out.append("| run | status | exit | seconds |")
    out.append("|---|---|---:|---:|")
    for r in (result.reference, result.target):
        out.append(f"| {r.role} | {r.status} | {r.exit_code} | {r.duration_s:.1f} |")
    if result.chart_png:
        out += ["", f"![error per module]({Path(result.chart_png).name})"]
    if p is not None:
        div = p.first_divergence
        out += ["", "## First divergence", ""]
        if div is None:
            out.append("None: every compared tensor passed or warned.")
        else:
            out.append(f"- where: {md_code(div.key)} ({md_inline(div.module_class or 'n/a')}), step {div.step}, "
                       f"inputs {div.inputs}")
            out.append(f"- likely cause: **{div.likely_cause}** — {md_inline(div.explanation)}")
            if div.ops:
                out.append(f"- torch functions in the module: {', '.join(md_code(o) for o in div.ops[:20])}")
            out.append(f"- verdict: {div.output.verdict} by {div.output.tier}: {md_inline(div.output.reason)}")
            out.append(f"- tolerances: {_tol(div.output)}")
        out += _gradient_markdown(p)
        out += ["", "## Modules in execution order", "",
                "| # | module call | class | inputs | outputs | max abs | max rel | cosine |",
                "|---:|---|---|---|---|---:|---:|---:|"]
        for m in p.modules[:400]:
            out.append(f"| {m.order} | {md_code(m.key, table=True)} | {md_inline(m.module_class or '')} | "
                       f"{m.input_verdict} | {m.output_verdict} | "
                       f"{_fmt(m.max_abs)} | {_fmt(m.max_rel)} | {'-' if m.cosine is None else f'{m.cosine:.6f}'} |")
        if len(p.modules) > 400:
            out.append(f"| … | {len(p.modules) - 400} more in parity.json | | | | | | |")
        if p.scalars:
            out += ["", "## Printed scalar streams", "", "| stream | values | verdict | tier | reason | tolerances |",
                    "|---|---:|---|---|---|---|"]
            for s in p.scalars:
                out.append(f"| {md_code(s.key, table=True)} | {s.ref_shape[0] if s.ref_shape else 0} | {s.verdict} | "
                           f"{s.tier} | {md_inline(s.reason)} | {_tol(s)} |")
        out += ["", "## Tolerances (docs/numerics.md)", "", "| dtype | rtol | atol | floor | tier pass | tier warn |",
                "|---|---:|---:|---:|---|---|"]
        for dtype, row in tolerance_table().items():
            out.append(f"| {dtype} | {row['rtol']:g} | {row['atol']:g} | {row['floor']:g} | "
                       f"<= {row['tier_pass_frac']:.2%} off by > {row['tier_pass_rel']:.2%} | "
                       f"<= {row['tier_warn_frac']:.2%} off by > {row['tier_warn_rel']:.2%} |")
        out.append("")
        out.append("Cosine tier: cosine > 0.99 and max abs < 1e-3. Error ratio (with a golden run): <= 1.2 pass, "
                   "<= 2 warn.")
        for n in p.notes:
            out += ["", f"> {md_inline(n)}"]
    for n in result.notes:
        out += ["", f"> {md_inline(n)}"]
    return "\n".join(out) + "\n"


def _label(text: str) -> str:
    """Run-derived text for a matplotlib label: one line, ``$`` not taken as mathtext."""
    return terminal(text).replace("\n", " ").replace("$", r"\$")


def chart_png(parity: ParityReport, path: Path) -> Path | None:
    """Max relative error and (1 - cosine) of each module call's outputs, in execution order."""
    rows = [m for m in parity.modules if m.max_rel is not None]
    if not rows:
        return None
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    xs = [m.order for m in rows]
    floor = 1e-12
    rel = [max(m.max_rel or 0.0, floor) for m in rows]
    cos = [max(1.0 - (m.cosine if m.cosine is not None else 1.0), floor) for m in rows]
    colours = [VERDICT_COLOURS.get(m.output_verdict, "#9e9e9e") for m in rows]
    fig, (ax1, ax2) = plt.subplots(2, 1, figsize=(max(8, min(24, len(rows) * 0.25)), 6.5), sharex=True)
    ax1.scatter(xs, rel, c=colours, s=18, zorder=3)
    ax1.plot(xs, rel, color="#90a4ae", linewidth=0.8, zorder=2)
    ax1.set_yscale("log")
    ax1.set_ylabel("max rel error")
    ax2.scatter(xs, cos, c=colours, s=18, zorder=3)
    ax2.plot(xs, cos, color="#90a4ae", linewidth=0.8, zorder=2)
    ax2.set_yscale("log")
    ax2.set_ylabel("1 - cosine")
    ax2.set_xlabel("module call, execution order")
    div = parity.first_divergence
    if div is not None:
        hit = next((m.order for m in rows if m.key == div.key), None)
        if hit is not None:
            for ax in (ax1, ax2):
                ax.axvline(hit, color="#c62828", linestyle="--", linewidth=1)
            ax1.annotate(f"first divergence: {_label(div.key)}\n({div.likely_cause})", (hit, rel[xs.index(hit)]),
                         textcoords="offset points", xytext=(8, 8), fontsize=8, color="#c62828")
    if len(rows) <= 40:
        ax2.set_xticks(xs)
        ax2.set_xticklabels([_label(m.key) for m in rows], rotation=75, fontsize=6, ha="right")
    ax1.set_title(f"parity {parity.verdict}: error per module (green pass, amber warn, red fail)")
    for ax in (ax1, ax2):
        ax.grid(True, which="major", alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
