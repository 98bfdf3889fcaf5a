"""``ferry check``: reference (CPU) vs target (tpx) run of the same command; parity + profile report."""

from __future__ import annotations

import argparse
import shlex

from agent.cli import DISK_LIMIT_HELP, environ, numbers

NAME = "check"
HELP = "run a command on CPU (reference) and on tpx (target), compare numerics, profile the target"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("path", help="repository to check (never modified: both runs use private copies)")
    parser.add_argument("--run", dest="run_cmd", required=True, metavar="CMD",
                        help='the command to run in the repository, e.g. "python train.py --steps 3"')
    parser.add_argument("--out", metavar="DIR", help="where reports go (default: a new temporary directory)")
    parser.add_argument("--steps", type=numbers.positive_int, default=2,
                        help="steps whose module calls are recorded (default 2)")
    parser.add_argument("--seed", type=numbers.seed, default=0, help="seed for both runs (default 0)")
    parser.add_argument("--timeout", type=numbers.seconds, default=600.0, help="seconds per run (default 600)")
    parser.add_argument("--no-profile", action="store_true", help="skip profiling the target run")
    parser.add_argument("--disk-limit", default=None, metavar="SIZE", help=DISK_LIMIT_HELP)
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                        help="FERRY_*/TPX_* setting for both runs (repeatable), e.g. FERRY_PROBE_MAX_BYTES=1e8")
    parser.add_argument("--target-set", action="append", default=[], metavar="KEY=VALUE",
                        help="FERRY_*/TPX_* setting for the target run only, e.g. TPX_MATMUL_PRECISION=highest")
    parser.add_argument("--json", action="store_true", help="print the full result as JSON")
    environ.add_arguments(parser)


def run(args: argparse.Namespace) -> int:
    from pathlib import Path

    from agent.cli import EXIT_FAILED, EXIT_OK, CliError, disk_limit, output_dir, sandbox_settings
    from tools.repopath import repo_path_problem

    if args.steps < 1:
        raise CliError(f"--steps must be at least 1, got {args.steps}")
    if args.timeout <= 0:
        raise CliError(f"--timeout must be positive, got {args.timeout}")
    if not args.run_cmd.strip():
        raise CliError('--run is empty: give the command to run, e.g. --run "python train.py"')
    try:
        shlex.split(args.run_cmd)
    except ValueError as exc:
        raise CliError(f"--run {args.run_cmd!r} cannot be parsed as a shell command: {exc}") from exc
    repo = Path(args.path).expanduser()
    problem = repo_path_problem(repo)
    if problem is not None:
        raise CliError(problem)
    if not repo.is_dir():
        raise CliError(f"{repo} is not a directory: pass the repository folder to check")
    out = output_dir(args.out, "--out") if args.out else None
    env = sandbox_settings(args.set, "--set")
    disk = disk_limit(args.disk_limit)
    target_env = sandbox_settings(args.target_set, "--target-set")
    own = environ.from_args(args, repo)

    from tools.parity.check import CheckInputError, check, result_text
    from tools.parity.models import CheckRequest

    try:
        result = check(CheckRequest(path=repo, command=args.run_cmd, out_dir=out,
                                    steps=args.steps, seed=args.seed, timeout_s=args.timeout,
                                    profile=not args.no_profile, env=env, target_env=target_env,
                                    disk_limit_bytes=disk, python=Path(own.python) if own.python else None,
                                    user_env=own.env, cwd=own.cwd))
    except CheckInputError as exc:
        raise CliError(str(exc)) from exc
    if args.json:
        print(result.model_dump_json(indent=2))
    else:
        print(result_text(result))
    return EXIT_OK if result.status in ("pass", "warn") else EXIT_FAILED
