"""check(CheckRequest): reference run (CPU, CUDA->cpu) vs target run (tpx, CUDA->tpx), both probed.

Then the parity report, the target's profile, and the outputs: ``parity.json``, ``report.md``,
``parity.png`` (and the profile's ``profile.md`` / ``trace.json``) under the output directory.
"""

from __future__ import annotations

import logging
import tempfile
import threading
from pathlib import Path
from typing import TYPE_CHECKING, TypedDict

from tools.parity.compare import compare_dumps
from tools.parity.models import CheckRequest, CheckResult, RunSummary
from tools.parity.render import chart_png, markdown_report, summary_text
from tools.probe.dump import DumpError
from tools.textsafe import terminal

if TYPE_CHECKING:  # imported when check() runs
    from tools.runner.models import RunLimits, RunResult

logger = logging.getLogger(__name__)


class CheckInputError(ValueError):
    """The check cannot run as asked (missing repository, unusable output dir)."""


class _BothRuns(TypedDict):
    """What the reference and the target run's requests share."""

    path: Path
    command: str | list[str]
    probe: bool
    seed: int
    timeout_s: float
    limits: RunLimits
    python: Path | None
    user_env: dict[str, str]
    cwd: str | None


def _summary(role: str, res: RunResult) -> RunSummary:
    return RunSummary(role=role, status=res.status, exit_code=res.exit_code, duration_s=res.duration_s,
                      probe_dir=str(res.probe_dir) if res.probe_dir else None,
                      profile_dir=str(res.profile_dir) if res.profile_dir else None,
                      stderr_tail=(res.error or res.stderr_tail or "")[-4000:],
                      trace_kind=res.trace.signature.kind if res.trace is not None else None)


def check(req: CheckRequest, cancel: threading.Event | None = None) -> CheckResult:
    """Run reference and target, compare their probe dumps, profile the target, write the reports.

    ``cancel``: an event another thread may set to stop the runs early (each then ends ``cancelled``)."""
    from tools.runner.api import RunnerInputError, run
    from tools.runner.models import RunLimits, RunRequest

    repo = Path(req.path).expanduser()
    if not repo.is_dir():
        raise CheckInputError(f"{repo} is not a directory; pass the repository to check")
    out = Path(req.out_dir) if req.out_dir else Path(tempfile.mkdtemp(prefix="ferry-check-"))
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise CheckInputError(f"cannot create output dir {out}: {exc}") from exc
    out = out.resolve()
    probe_env = {"FERRY_PROBE_STEPS": str(req.steps), **req.env}
    # the profiled window starts after the probed steps, so probe copies do not skew the timings
    profile_env = {"FERRY_PROFILE_WARMUP": str(req.steps)}
    common = _BothRuns(path=repo, command=req.command, probe=True, seed=req.seed, timeout_s=req.timeout_s,
                       limits=RunLimits(disk_bytes=req.disk_limit_bytes), python=req.python,
                       user_env=dict(req.user_env), cwd=req.cwd)
    try:
        logger.info("check: reference run (cpu, CUDA redirected to cpu)")
        ref = run(RunRequest(**common, device="cpu", redirect_cuda="cpu", profile=False, env=probe_env,
                             artifacts_dir=out / "reference"), cancel=cancel)
        logger.info("check: target run (tpx, CUDA redirected to tpx)")
        tgt = run(RunRequest(**common, device="tpx", redirect_cuda="tpx", profile=req.profile,
                             env={**profile_env, **probe_env, **req.target_env}, artifacts_dir=out / "target"),
                  cancel=cancel)
    except RunnerInputError as exc:
        raise CheckInputError(str(exc)) from exc
    result = CheckResult(status="run_failed", summary="", out_dir=str(out), reference=_summary("reference", ref),
                         target=_summary("target", tgt))
    for role, res in (("reference", ref), ("target", tgt)):
        for refused in res.artifacts_refused:
            result.notes.append(f"the {role} run's {refused.path} was refused and not read ({refused.reason})")
        if res.status != "ok":
            kind = res.trace.signature.kind if res.trace is not None else res.status
            result.notes.append(f"the {role} run ended with status {res.status} (exit {res.exit_code}, {kind}); "
                                "compared whatever its probe flushed before it ended")
    no_dump = [f"the {role} run left no probe dump (status {res.status})"
               for role, res in (("reference", ref), ("target", tgt)) if res.probe_dir is None]
    if ref.probe_dir is None or tgt.probe_dir is None:  # it never started: a sandbox error
        result.notes.append(f"no parity report: {'; '.join(no_dump)}")
    else:
        try:
            result.parity = compare_dumps(ref.probe_dir, tgt.probe_dir)
        except (DumpError, TypeError) as exc:
            result.notes.append(f"no parity report: {exc}")
    if req.profile and tgt.profile_dir is not None:
        from tools.profile.report import ProfileError, build_profile_report

        try:
            result.profile = build_profile_report(tgt.profile_dir, repo)
        except ProfileError as exc:
            result.notes.append(f"no profile: {exc}")
    runs_ok = ref.status == "ok" and tgt.status == "ok"
    if result.parity is not None:
        result.status = result.parity.verdict if runs_ok and result.parity.verdict != "skipped" else (
            "run_failed" if not runs_ok else "fail")
        result.summary = result.parity.summary
        if result.parity.verdict == "skipped":
            result.summary += (" — nothing was compared: the program ran no nn.Module, printed no metric, saved "
                               "no tensor, left none at top level and recorded nothing")
        png = chart_png(result.parity, out / "parity.png")
        result.chart_png = str(png) if png else None
    else:
        result.summary = "the runs produced no comparable probe dumps"
    if not runs_ok:
        result.summary = f"{'reference' if ref.status != 'ok' else 'target'} run failed; " + result.summary
    result.report_md = str(out / "report.md")
    result.report_json = str(out / "parity.json")
    Path(result.report_md).write_text(markdown_report(result))
    Path(result.report_json).write_text(result.model_dump_json(indent=1))
    return result


def result_text(result: CheckResult) -> str:
    """The readable summary printed by ``ferry check``: module keys, op names, messages and notes
    come from the runs, so the whole is passed through tools.textsafe.terminal."""
    lines = [f"ferry check: {result.status.upper()}"]
    for r in (result.reference, result.target):
        lines.append(f"  {r.role:9} run: {r.status} (exit {r.exit_code}, {r.duration_s:.1f}s)"
                     + (f" — {r.trace_kind}" if r.trace_kind else ""))
    if result.parity is not None:
        lines.append(summary_text(result.parity))
    else:
        lines.append("  " + result.summary)
    if result.profile is not None:
        top = result.profile.findings[:5]
        lines.append(f"  profile: {len(result.profile.findings)} finding(s); "
                     f"d2h syncs {result.profile.d2h_syncs_total}, "
                     f"CPU-fallback time {result.profile.fallback_time_us / 1000:.1f} ms")
        for f in top:
            loc = f" at {f.file}:{f.line}" if f.file else ""
            lines.append(f"    [{f.severity}] {f.title}{loc}: {f.suggestion}")
    for n in result.notes:
        lines.append(f"  note: {n}")
    chart = f", {result.chart_png}" if result.chart_png else ""
    lines.append(f"  reports: {result.report_md}, {result.report_json}{chart}")
    if result.profile is not None and result.profile.markdown_path:
        trace = f", trace {result.profile.trace_path}" if result.profile.trace_path else ""
        lines.append(f"  profile: {result.profile.markdown_path}{trace}")
    return terminal("\n".join(lines))
