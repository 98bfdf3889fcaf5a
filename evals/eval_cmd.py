"""``ferry eval``: run an eval suite, regrade a run, or compare two runs.

A command of the ``ferry`` CLI registered through the ``ferry.commands`` entry point (pyproject.toml),
so that the CLI in ``agent`` never imports ``evals``.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from agent.cli import numbers
from agent.settings import settings

if TYPE_CHECKING:
    from evals.cases import Suite
    from evals.results import CaseResult

NAME = "eval"
HELP = "migrate and grade every case of an eval suite (default: the synthetic suite), regrade or compare runs"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    from agent.cli.migrate_cmd import add_llm_limit_arguments
    from evals.compare import describe_thresholds

    parser.formatter_class = argparse.RawDescriptionHelpFormatter
    parser.epilog = (
        "exit status:\n"
        "  a run or --regrade: 0 every case ended with its expected status, 1 otherwise\n"
        "  --compare A B:      0 no regression; 1 a grade regression (a case in both runs got a lower grade,\n"
        "                      or a pass-to-pass test broke); 3 no grade regression, but a case in both runs\n"
        "                      got slower or costlier beyond a threshold; a case in one run only is\n"
        "                      'added' or 'removed', never a regression\n"
        "  --validate:         0 every case's grading tests mean something, 1 otherwise\n"
        "  2 bad usage (every command)\n"
        f"thresholds (the increase must pass both): {describe_thresholds()}\n"
        "details: docs/evals.md")

    parser.add_argument("suite", metavar="SUITE", nargs="?",
                        help="synthetic (default: evals/suite), real (evals/real/manifest.toml), a directory of "
                             "*/ferry-eval.toml cases or a manifest.toml of real cases")
    parser.add_argument("--suite", dest="suite_opt", metavar="SUITE", help="the same as the SUITE argument")
    parser.add_argument("--jobs", type=numbers.positive_int, default=1, help="cases migrated side by side (default 1)")
    parser.add_argument("--policy", choices=("offline", "llm"), default="offline",
                        help="fixing policy (default offline)")
    parser.add_argument("--out", metavar="DIR", default="ferry-eval",
                        help="where the results go (default ./ferry-eval)")
    parser.add_argument("--case", action="append", metavar="NAME", help="only this case (repeatable)")
    parser.add_argument("--mirror", metavar="DIR", help="the real suite: a directory of clones of its repositories")
    parser.add_argument("--ray", metavar="ADDRESS", help="run the cases as Ray tasks: a cluster address or 'local'")
    parser.add_argument("--llm-model", help="--policy llm: the model (default $FERRY_LLM_MODEL)")
    parser.add_argument("--llm-base-url",
                        help="--policy llm: any OpenAI-compatible server (default $FERRY_LLM_BASE_URL)")
    add_llm_limit_arguments(parser)
    parser.add_argument("--prices", metavar="FILE",
                        help="model prices for the cost estimate (default $FERRY_LLM_PRICES or agent/llm/prices.toml)")
    parser.add_argument("--regrade", metavar="DIR",
                        help="grade the saved patches of the run in DIR again (no migration)")
    parser.add_argument("--compare", nargs=2, metavar=("A", "B"),
                        help="compare two runs (directories or results.jsonl): grades, pass-to-pass tests, and "
                             "time, iterations, runs, tokens and cost beyond thresholds (exit statuses below)")
    parser.add_argument("--baseline", metavar="RUN",
                        help="an earlier run (directory or results.jsonl) that report.html compares this run with "
                             "(default for --regrade: the run regraded); the exit status stays the run's")
    parser.add_argument("--validate", action="store_true",
                        help="check each case's grading tests on the original code (f2p fail, p2p pass)")
    parser.add_argument("--no-progress", action="store_true",
                        help="no live display: one line per finished case on stderr instead "
                             "(the default when stderr is not a terminal)")
    parser.add_argument("--json", action="store_true", help="machine-readable output")


def run(args: argparse.Namespace) -> int:
    from agent.cli import CliError, output_dir
    from evals.cases import SuiteError, load_suite
    from evals.results import ResultsError, read_results

    if args.jobs < 1:
        raise CliError(f"--jobs must be at least 1, got {args.jobs}")
    if args.suite_opt is not None:
        if args.suite is not None and args.suite != args.suite_opt:
            raise CliError(f"two suites given: {args.suite} and --suite {args.suite_opt}; give one")
        args.suite = args.suite_opt
    try:
        if args.compare:
            return _compare(args, read_results(Path(args.compare[0])), read_results(Path(args.compare[1])))
        args.baseline_results = read_results(Path(args.baseline)) if args.baseline else None
        suite = load_suite(args.suite).select(args.case)
    except (SuiteError, ResultsError) as exc:
        raise CliError(str(exc)) from exc
    if args.validate:
        return _validate(args, suite)
    if args.regrade:
        from evals.regrade import regrade

        out = output_dir(args.out if args.out != "ferry-eval" else Path(args.regrade) / "regraded", "--out")
        try:
            if args.baseline_results is None:
                args.baseline, args.baseline_results = args.regrade, read_results(Path(args.regrade))
            results = regrade(Path(args.regrade), suite, out)
        except ResultsError as exc:
            raise CliError(str(exc)) from exc
        return _finish(args, results, out, f"ferry eval --regrade {args.regrade}")
    return _run(args, suite, output_dir(args.out, "--out"))


def _run(args: argparse.Namespace, suite: Suite, out: Path) -> int:
    from agent.cli import CliError
    from evals.harness import EvalError, run_suite
    from evals.prices import Prices
    from evals.progress import EvalProgress, default_mode

    try:
        prices = Prices.load(Path(args.prices)) if args.prices else Prices.load()
    except ValueError as exc:
        raise CliError(str(exc)) from exc
    llm = None
    if args.policy == "llm":
        from agent.cli.migrate_cmd import llm_limits, llm_max_cost
        from evals.harness import LLMSettings

        model = args.llm_model or settings().llm.model
        if not model:
            raise CliError("--policy llm needs a model: pass --llm-model or set FERRY_LLM_MODEL (and --llm-base-url "
                           "or FERRY_LLM_BASE_URL for a server other than OpenAI's)")
        llm = LLMSettings(model=model, base_url=args.llm_base_url or settings().llm.base_url or None,
                          limits=llm_limits(args), max_cost=llm_max_cost(args, model))
    mirror = Path(args.mirror).expanduser() if args.mirror else None
    if mirror is not None and not mirror.is_dir():
        raise CliError(f"--mirror {args.mirror} is not a directory of clones")
    mode = default_mode(sys.stderr, no_live=args.no_progress or args.json)
    try:
        with EvalProgress([c.name for c in suite.cases], mode=mode) as progress:
            results = run_suite(suite, out, jobs=args.jobs, policy=args.policy, prices=prices, llm=llm,
                                mirror=mirror, progress=progress, executor=args.ray)
    except EvalError as exc:
        raise CliError(str(exc)) from exc
    except RuntimeError as exc:  # Ray unavailable or unreachable
        from evals.ray_exec import RayUnavailable

        if isinstance(exc, RayUnavailable):
            raise CliError(str(exc)) from exc
        raise
    return _finish(args, results, out, f"ferry eval {suite.name} ({args.policy})")


def _finish(args: argparse.Namespace, results: list[CaseResult], out: Path, title: str) -> int:
    from evals.compare import compare, summary_line, to_json
    from evals.report import leaderboard, totals, write_reports

    baseline = getattr(args, "baseline_results", None)
    cmp = compare(baseline, results) if baseline is not None else None
    paths = write_reports(results, out, title, baseline=baseline, baseline_label=args.baseline)
    if args.json:
        print(json.dumps({"totals": totals(results), "results": [r.model_dump(mode="json") for r in results],
                          **({"baseline": {"run": args.baseline, **to_json(cmp)}} if cmp is not None else {}),
                          **{k: str(v) for k, v in paths.items()}}, indent=2))
    else:
        from rich.console import Console
        from rich.markdown import Markdown

        board = leaderboard(results, title)
        if sys.stdout.isatty():
            Console().print(Markdown(board))
        else:  # a log or a pipe: the Markdown itself, not a table squeezed into 80 columns
            print(board)
        if cmp is not None:
            print(f"against the baseline {args.baseline}: {summary_line(cmp, 'baseline', 'this run')}")
        print(f"results: {out / 'results.jsonl'}, {paths['leaderboard']}, {paths['report']}")
    return 0 if all(r.as_expected for r in results) else 1


def _compare(args: argparse.Namespace, a: list[CaseResult], b: list[CaseResult]) -> int:
    from evals.compare import compare, render, to_json

    cmp = compare(a, b)
    if args.json:
        print(json.dumps(to_json(cmp), indent=2))
    else:
        print(render(cmp, args.compare[0], args.compare[1]))
    return cmp.exit_code


def _validate(args: argparse.Namespace, suite: Suite) -> int:
    import tempfile

    from evals.cases import SyntheticCase
    from evals.grading import validate

    problems: dict[str, list[str]] = {}
    with tempfile.TemporaryDirectory(prefix="ferry-validate-") as tmp:
        for case in suite.cases:
            if isinstance(case, SyntheticCase):
                problems[case.name] = validate(case, Path(tmp) / case.name, timeout_s=case.timeout_s).problems()
    if args.json:
        print(json.dumps(problems, indent=2))
    else:
        for name, found in problems.items():
            print(f"{name}: {'ok' if not found else '; '.join(found)}")
    return 1 if any(problems.values()) else 0
