"""``ferry migrate``: scan, rewrite, run on tpx, fix, prove parity, profile, and hand back a patch."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from agent.cli import DISK_LIMIT_HELP, environ, numbers
from agent.settings import COST_ENV, COST_FLAG, parse_max_cost, settings

if TYPE_CHECKING:
    from agent.llm.config import LLMLimits
    from agent.migration.facade import MigrationOptions, RunScheduler
    from agent.settings import MaxCost

NAME = "migrate"
HELP = "migrate a repository from CUDA to tpx: codemods, runs, fixes, parity, profile, patch + report"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("path", metavar="PATH", help="the repository to migrate (never modified unless --apply)")
    parser.add_argument("--run", required=True, metavar="CMD",
                        help='the command that runs it, e.g. "python train.py --steps 10"')
    parser.add_argument("--test", metavar="CMD", help='the test command, e.g. "python -m pytest -q tests"')
    parser.add_argument("--out", metavar="DIR", help="write ferry.patch, report.md and result.json here")
    parser.add_argument("--llm", action="store_true",
                        help="let a model fix what the offline rules cannot (FERRY_LLM_BASE_URL, FERRY_LLM_MODEL, "
                             "an API key)")
    parser.add_argument("--offline", action="store_true", help="never use a model, even if FERRY_LLM_* is configured")
    parser.add_argument("--approve", action="store_true",
                        help="ask before applying any edit that is not a catalogue codemod")
    parser.add_argument("--apply", action="store_true", help="apply the patch to PATH after a successful migration")
    parser.add_argument("--coverage", action="store_true",
                        help="measure line coverage of the repository's code in the tests before and after, with the "
                             "coverage.py of the runs' interpreter (on by itself where the repository configures "
                             "coverage); a drop past 5 points is refused like a weakened test (docs/guard.md)")
    parser.add_argument("--explain-drift", action="store_true",
                        help="when parity passes by the drift budget of the later training steps, measure where the "
                             "drift comes from in side runs at once (without it they run only if the tests fail, "
                             "where their measurement can change the outcome)")
    add_rewrite_arguments(parser)
    parser.add_argument("--max-iterations", type=numbers.positive_int, default=8,
                        help="fix/verify rounds before failed_budget (default 8)")
    parser.add_argument("--run-timeout", type=numbers.seconds, default=600.0, help="seconds per run (default 600)")
    parser.add_argument("--max-wall", type=numbers.seconds, default=None, metavar="SECONDS",
                        help="wall-time budget of the whole migration: runs are capped by what is left, and one that "
                             "cannot finish in it is not started (ends failed_budget with its report; default: none)")
    parser.add_argument("--seed", type=numbers.seed, default=0, help="seed for the reference and target runs")
    parser.add_argument("--disk-limit", default=None, metavar="SIZE", help=DISK_LIMIT_HELP.replace("a run", "each run"))
    parser.add_argument("--state-dir", metavar="DIR", default=settings().paths.state_dir,
                        help="checkpoints and workspaces (default ~/.ferry or $FERRY_STATE_DIR)")
    parser.add_argument("--id", dest="migration_id", metavar="ID", help="migration id (default: generated)")
    parser.add_argument("--llm-model", help="model name (default $FERRY_LLM_MODEL)")
    parser.add_argument("--llm-base-url", help="OpenAI-compatible server URL (default $FERRY_LLM_BASE_URL)")
    add_llm_limit_arguments(parser)
    parser.add_argument("--json", action="store_true", help="print result.json on stdout (no progress display)")
    environ.add_arguments(parser)


def add_rewrite_arguments(parser: argparse.ArgumentParser) -> None:
    """``--device`` and ``--skip-rule``: what the codemods write and leave out (migrate and pr)."""
    parser.add_argument("--device", choices=("accelerator", "tpx"), default="accelerator",
                        help="codemod target: device-generic code (default) or tpx pinned")
    parser.add_argument("--skip-rule", dest="skip_rules", action="append", default=[], metavar="RULE",
                        help="leave this rule out: a catalogue codemod (FRY024) or a policy rule (float64_to_float32); "
                             "repeatable")


def add_llm_limit_arguments(parser: argparse.ArgumentParser) -> None:
    """The model's limits (each also an environment variable; a flag wins over it), for migrate and eval."""
    from agent.llm.config import DEFAULTS, LIMIT_SOURCES

    helps = {
        "request_timeout_s": ("SECONDS", numbers.seconds, "seconds per request, capped by the LLM wall budget left"),
        "max_retries": ("N", numbers.non_negative_int, "retries of a timeout, 429, 5xx or refused connection"),
        "backoff_s": ("SECONDS", numbers.non_negative_seconds,
                      "first backoff between retries, doubling (Retry-After wins when longer)"),
        "max_wall_s": ("SECONDS", numbers.seconds, "wall-time budget of all the model's use in the migration"),
        "max_calls": ("N", numbers.positive_int, "requests to the model in the migration"),
        "max_tokens": ("N", numbers.positive_int, "tokens (prompt + completion) in the migration"),
        "max_reply_chars": ("N", numbers.positive_int, "largest reply content or tool-call arguments accepted"),
    }
    for field, (flag, env) in LIMIT_SOURCES.items():
        metavar, kind, text = helps[field]
        parser.add_argument(flag, dest=f"llm_{field}", type=kind, default=None, metavar=metavar,
                            help=f"{text} (default ${env} or {getattr(DEFAULTS, field):g})")
    parser.add_argument(COST_FLAG, dest="llm_max_cost", default=None, metavar="USD|none",
                        help="cost cap in US dollars of the model's use in the migration, checked before each "
                             "request with its worst-case cost (prices: agent/llm/prices.toml or $FERRY_LLM_PRICES); "
                             f"'none': no cap in money, needed for a model the price table does not price "
                             f"(default ${COST_ENV} or no cap)")


def llm_max_cost(args: argparse.Namespace, model: str | None) -> MaxCost | None:
    """--llm-max-cost, else $FERRY_LLM_MAX_COST_USD (None: neither); a bad value, or a model with no price and
    no cap decided, is a CliError (exit 2): the migration does not start."""
    from agent.cli import CliError
    from agent.llm.cost import unpriced_problem
    from agent.llm.prices import Prices
    from agent.migration.options import env_max_cost

    try:
        given = getattr(args, "llm_max_cost", None)
        cap = parse_max_cost(given) if given is not None else env_max_cost()
        prices = Prices.load()
    except ValueError as exc:
        raise CliError(str(exc)) from None
    problem = unpriced_problem(model, cap, (model or "") in prices.models)
    if problem is not None:
        raise CliError(problem)
    return cap


def llm_limits(args: argparse.Namespace) -> LLMLimits:
    """The limits from the flags, else FERRY_LLM_*, else the defaults; a bad value is a CliError (exit 2)."""
    from agent.cli import CliError
    from agent.llm.config import LIMIT_SOURCES, resolve_limits

    try:
        return resolve_limits({field: getattr(args, f"llm_{field}", None) for field in LIMIT_SOURCES})
    except ValueError as exc:
        raise CliError(str(exc)) from None


def skipped_rules(ids: list[str]) -> list[str]:
    """The --skip-rule ids, checked against the known rule ids (an unknown one is a CliError naming close matches)."""
    if not ids:  # the catalogue (libcst and every rule) loads later, beside the reference run, not before it
        return []
    from agent.cli import CliError
    from agent.policy.catalogue import known_rules, unknown_rule_message

    known = list(known_rules())
    for rule_id in ids:
        problem = unknown_rule_message(rule_id, known)
        if problem is not None:
            raise CliError(f"--skip-rule: {problem}")
    return list(dict.fromkeys(ids))


def build_options(args: argparse.Namespace) -> MigrationOptions:
    from agent.cli import CliError, disk_limit, output_dir
    from agent.llm.config import configured
    from agent.migration.facade import DEFAULT_STATE_DIR, options_for, state_dir
    from tools.repopath import repo_path_problem

    src = Path(args.path).expanduser()
    problem = repo_path_problem(src)
    if problem is not None:
        raise CliError(problem)
    if not src.is_dir():
        raise CliError(f"{args.path} is not a directory; pass the root folder of the repository to migrate")
    if not args.run.strip():
        raise CliError('--run is empty; give the command that runs the program, e.g. --run "python train.py"')
    if args.max_iterations < 0:
        raise CliError(f"--max-iterations must be >= 0, got {args.max_iterations}")
    if args.run_timeout <= 0:
        raise CliError(f"--run-timeout must be positive, got {args.run_timeout}")
    if args.max_wall is not None and not args.max_wall > 0:
        raise CliError(f"--max-wall must be a positive number of seconds, got {args.max_wall}")
    skip_rules = skipped_rules(getattr(args, "skip_rules", None) or [])
    use_llm = (args.llm or configured()) and not args.offline
    if args.llm and args.offline:
        raise CliError("--llm and --offline contradict each other; pick one")
    if use_llm and not (args.llm_model or settings().llm.model):
        raise CliError("--llm needs a model: set FERRY_LLM_MODEL (and FERRY_LLM_BASE_URL for a non-OpenAI server) "
                       "or pass --llm-model")
    out = str(output_dir(args.out, "--out")) if args.out else None
    if out and Path(out).resolve() == src.resolve():
        raise CliError("--out must not be the repository itself; choose another directory")
    if out and src.resolve() in Path(out).parents:
        raise CliError("--out must not be inside the repository (the outputs would become part of it); "
                       "choose a directory outside it")
    sdir = output_dir(args.state_dir or DEFAULT_STATE_DIR, "--state-dir")
    own = environ.from_args(args, src)
    limits = llm_limits(args)
    model = (args.llm_model or settings().llm.model) if use_llm else args.llm_model
    max_cost = llm_max_cost(args, model) if use_llm else None
    return options_for(
        source=str(src.resolve()), run_command=args.run, test_command=args.test or None, out_dir=out,
        state_dir=str(state_dir(sdir)), llm=use_llm, approve=args.approve, apply=args.apply,
        device=args.device, skip_rules=skip_rules, max_iterations=args.max_iterations,
        run_timeout_s=args.run_timeout, seed=args.seed,
        max_wall_s=args.max_wall, disk_limit_bytes=disk_limit(getattr(args, "disk_limit", None)),
        llm_limits=limits,
        llm_model=model, llm_base_url=args.llm_base_url,
        python=own.python, env=own.env, cwd=own.cwd, llm_max_cost=max_cost,
        coverage=bool(getattr(args, "coverage", False)),
        explain_drift=bool(getattr(args, "explain_drift", False)),
    )


def _shown(value: str) -> str:
    return repr(value if len(value) <= 60 else value[:60] + "...")


def start_warm(args: argparse.Namespace) -> RunScheduler:
    """The scheduler of the migration's runs, its warm interpreter (``tools.runner.warm``) started first
    thing: the interpreter's import of torch (about a second on one core) then goes on while Ferry
    itself imports, parses its options and opens its store, instead of after, and the reference run it
    forks comes sooner. Only for what ``agent.migration.early.start_early`` would start it for anyway
    (``warm_first.runs_start_warm``: Ferry's own interpreter and no variables of the user's): that later call
    then finds it running, as this one does where ``agent.cli.main`` started it from the words as typed
    (``agent.cli.warm_first``). A command line rejected below leaves it to close at exit."""
    from agent.cli.warm_first import runs_start_warm
    from agent.migration.facade import RunScheduler

    runs = RunScheduler()
    if runs_start_warm(getattr(args, "python", None), getattr(args, "env", None)):
        runs.prewarm_runs(args.seed, user_env={})
    return runs


def run(args: argparse.Namespace) -> int:
    from agent.cli import CliError
    from agent.ids import ID_RULE, id_problem

    if args.migration_id is not None:  # before anything: the id names directories in the state dir
        problem = id_problem(args.migration_id)
        if problem is not None:
            raise CliError(f"--id {_shown(args.migration_id)}: {problem}; {ID_RULE}")
    runs = start_warm(args)  # before anything heavy is imported

    from agent.cli.approval import drive_interactively
    from agent.cli.progress import TerminalProgress, exit_code, print_result
    from agent.errors import FerryAgentError
    from agent.migration.facade import new_migration_id, start
    opts = build_options(args)
    migration_id = args.migration_id or new_migration_id()  # said first: a migration cut short resumes by it

    with TerminalProgress(enabled=not args.json) as progress:
        if not args.json:  # first: a migration cut short (Ctrl-C, a crash) is resumed by this id
            progress.console.print(f"migration {migration_id}: resume with `ferry resume {migration_id}` "
                                   "if interrupted")
        try:
            state = start(opts, migration_id=migration_id, progress=progress, runs=runs)
        except (ValueError, FerryAgentError) as exc:  # id taken; checkpointer not usable (e.g. Postgres extra missing)
            raise CliError(str(exc)) from exc
        except KeyboardInterrupt:  # its checkpoints are kept: say how to go on (ferry: interrupted, exit 130)
            print(f"migration {migration_id} interrupted: resume it with `ferry resume {migration_id}`",
                  file=sys.stderr)
            raise
    state = drive_interactively(state, opts.state_dir, args.json, runs)
    if state.waiting:
        return 1
    print_result(state, args.json)
    return exit_code(state)
