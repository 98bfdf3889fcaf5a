"""``ferry run``: run a command on a private copy of a repo in the sandbox; structured result."""

from __future__ import annotations

import argparse
import json
import sys
from typing import TYPE_CHECKING

from agent.cli import DISK_LIMIT_HELP, environ, numbers

if TYPE_CHECKING:
    from pathlib import Path

    from tools.runner.models import RunResult

NAME = "run"
HELP = "run a command in the sandbox on a copy of the repo (tpx or cpu, optional CUDA redirect)"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("path", nargs="?",
                        help="repository folder (a private copy is run; the original is never written)")
    parser.add_argument("cmd", nargs=argparse.REMAINDER, help="the command, after `--` (e.g. -- python train.py)")
    _add_options(parser)


def _add_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--device", choices=("tpx", "cpu"), default="tpx", help="device the child gets (default tpx)")
    parser.add_argument("--redirect-cuda", choices=("tpx", "cpu"), default=None, metavar="DEV",
                        help="run original CUDA code on DEV (tpx or cpu) and log every redirected call site")
    parser.add_argument("--probe", action="store_true",
                        help="record module outputs for parity (kept in the artifacts folder)")
    parser.add_argument("--profile", action="store_true", help="collect a tpx profile (kept in the artifacts folder)")
    parser.add_argument("--seed", type=numbers.seed, default=0,
                        help="FERRY_SEED for random, numpy and torch (default 0)")
    parser.add_argument("--timeout", type=numbers.seconds, default=600.0,
                        help="wall-clock limit in seconds (default 600)")
    parser.add_argument("--memory-gb", type=numbers.gigabytes, default=None,
                        help="address-space limit per process, GiB (default 16)")
    parser.add_argument("--disk-limit", default=None, metavar="SIZE", help=DISK_LIMIT_HELP)
    parser.add_argument("--isolation", choices=("auto", "bwrap", "unshare", "rlimits"), default=None,
                        help="force an isolation level (default: the strongest available)")
    parser.add_argument("--artifacts", default=None,
                        help="folder for logs, result.json, probe/profile output (default: a temporary folder, "
                             "removed after the run unless --keep, --keep-workspace, --probe or --profile)")
    parser.add_argument("--keep", action="store_true",
                        help="keep the run's temporary artifacts folder (its path is printed)")
    parser.add_argument("--keep-workspace", action="store_true",
                        help="keep the copy that ran under the artifacts folder")
    parser.add_argument("--env", action="append", default=[], metavar="KEY=VALUE",
                        help="a variable for the child (repeatable): FERRY_*/TPX_* keys are Ferry settings, any other "
                             "is your own (e.g. PYTHONPATH=., kept after Ferry's bootstrap dir); PATH, HOME and the "
                             "runner's hooks are refused")
    environ.add_arguments(parser, env=False)
    parser.add_argument("--check", action="store_true", help="only report the isolation level and torch/tpx status")
    parser.add_argument("--json", action="store_true", help="print the RunResult as JSON")


def _render(result: RunResult) -> str:
    """The readable result. Most of it (output tails, messages, test names, file names) is the
    program's own text: the whole is passed through tools.textsafe.terminal before printing."""
    from tools.textsafe import terminal

    lines = [f"status: {result.status} (exit {result.exit_code if result.exit_code is not None else '-'}"
             + (f", signal {result.signal}" if result.signal else "") + f") in {result.duration_s:.2f}s",
             f"isolation: {result.isolation}"
             + (f" ({'; '.join(result.isolation_reasons)})" if result.isolation_reasons else ""),
             f"device: {result.device}"
             + (f", CUDA redirected to {result.redirect_cuda}" if result.redirect_cuda else "")]
    if result.python and result.python != sys.executable:
        lines.append(f"python: {result.python}" + (f" ({result.warm_fallback})" if result.warm_fallback else ""))
    if result.cwd:
        lines.append(f"working directory: {result.cwd}")
    if result.disk_cap:
        lines.append(f"disk cap: {result.disk_cap}")
    if result.seccomp:
        lines.append(f"seccomp: {result.seccomp}")
    if result.resource_control:
        lines.append(f"resource control: {result.resource_control}"
                     + (f" ({'; '.join(result.resource_control_reasons)})" if result.resource_control_reasons else ""))
    if result.error:
        lines.append(f"error: {result.error}")
    if result.trace is not None:
        t = result.trace
        lines.append(f"failure: {t.exc_type}: {t.message.splitlines()[0] if t.message else ''}")
        lines.append(f"signature: {t.signature.key()}" + (f" at {t.location}" if t.location else ""))
        if t.signature.kind in ("disk_quota", "killed_by_limit") and t.signature.detail:
            lines.append(f"  {t.signature.detail}")
        for f in t.user_frames[-5:]:
            lines.append(f"  {f.file}:{f.line} in {f.function}: {f.source or ''}")
        failed = [x for x in t.tests if x.outcome in ("failed", "error")]
        if t.tests:
            lines.append(f"tests: {len(t.tests)} ran, {len(failed)} failed")
    if result.stdout_tail.strip():
        lines += ["--- stdout (tail) ---", result.stdout_tail.rstrip()[-3000:]]
    if result.stderr_tail.strip():
        lines += ["--- stderr (tail) ---", result.stderr_tail.rstrip()[-3000:]]
    for label, path in (("redirect log", result.redirect_log_path), ("probe", result.probe_dir),
                        ("profile", result.profile_dir), ("artifacts", result.artifacts_dir)):
        if path:
            lines.append(f"{label}: {path}")
    if result.artifacts_refused:
        lines.append(f"refused artifacts ({len(result.artifacts_refused)}, not read; the run left something "
                     "other than Ferry's own files there):")
        lines += [f"  {r.path}: {r.reason}" for r in result.artifacts_refused]
    return terminal("\n".join(lines))


def _artifacts_dir(value: str, repo: str) -> Path:
    """``--artifacts``: a directory Ferry may write, outside the repository, and not one of the user's
    holding what each run replaces (``child/``, ``collected/``, ``result.json``...)."""
    from pathlib import Path

    from agent.cli import CliError, output_dir
    from tools.runner.api import foreign_entries

    path = output_dir(value, "--artifacts")
    src = Path(repo).expanduser().resolve()
    if path == src or src in path.parents:
        raise CliError(f"--artifacts {value}: {path} is inside the repository (the next run's copy would hold this "
                       "run's outputs); choose a directory outside it, e.g. --artifacts ./ferry-run")
    clash = foreign_entries(path)
    if clash:
        raise CliError(f"--artifacts {value}: {path} already holds {', '.join(clash)}, which no Ferry run made there "
                       "and each run replaces; choose a new or empty directory")
    return path


def _split_without_dashes(words: list[str]) -> tuple[list[str], list[str]]:
    """``words`` given without ``--``, read as the leading ``ferry run`` options and the command
    after them (for the corrected command line a usage error shows)."""
    opts = argparse.ArgumentParser(prog="ferry run", add_help=False)
    _add_options(opts)
    i = 0
    while i < len(words) and words[i].startswith("-"):
        action = opts._option_string_actions.get(words[i].split("=", 1)[0])
        takes_value = action is not None and action.nargs != 0 and "=" not in words[i]
        i += 2 if takes_value else 1
    return words[:i], words[i:]


def _temporary_artifacts(args: argparse.Namespace) -> bool:
    """Whether this run's artifacts go to a folder removed after it: no --artifacts named one, and
    nothing asked for what would be read from it afterwards (--keep, --keep-workspace, --probe,
    --profile)."""
    return not (args.artifacts or args.keep or args.keep_workspace or args.probe or args.profile)


def run(args: argparse.Namespace) -> int:
    from pathlib import Path

    from agent.cli import CliError, disk_limit, sandbox_settings

    if args.check:
        from agent.cli import doctor_cmd

        report = doctor_cmd.collect()
        print(json.dumps(report, indent=2) if args.json else doctor_cmd.render(report))
        return 0 if report["isolation"]["error"] is None else 1
    usage = "usage: ferry run PATH [options] -- COMMAND [ARGS...]  (e.g. ferry run . --device cpu -- python train.py)"
    if not args.path or args.path.startswith("-"):
        raise CliError(f"give the repository folder first, then the command after `--`; {usage}")
    cmd = list(args.cmd)
    # which words are Ferry's options and which the command's: only `--` says (argparse drops a `--`
    # that follows the options and PATH, so the words as typed tell whether there was one)
    typed = getattr(args, "argv", None)
    if cmd and "--" not in (cmd if typed is None else typed):
        lead, rest = _split_without_dashes(cmd)
        if rest:
            raise CliError(f"put `--` before the command: Ferry cannot tell where its options end and the command "
                           f"begins without it (put the options before `--` and the command after it), e.g. "
                           f"ferry run {args.path} {' '.join([*lead, '--', *rest])}; {usage}")
        cmd.append("--")  # options and no command: said below
    # argparse hands everything after PATH to the command: options written between PATH and `--` are parsed here.
    cut = cmd.index("--") if "--" in cmd else 0
    if cut:
        opts = argparse.ArgumentParser(prog="ferry run", add_help=False)
        _add_options(opts)
        try:
            opts.parse_args(cmd[:cut], namespace=args)
        except SystemExit as exc:
            raise CliError(f"cannot parse options {' '.join(cmd[:cut])!r}; put the options before `--` and the "
                           f"command after it; {usage}") from exc
    cmd = cmd[cut + 1:] if "--" in cmd else cmd[cut:]
    if not cmd:
        raise CliError(f"no command given: put it after `--`; {usage}")
    if args.timeout <= 0:
        raise CliError(f"--timeout must be positive, got {args.timeout}")

    from tools.runner.api import RunnerInputError
    from tools.runner.api import run as run_tool
    from tools.runner.models import RunLimits, RunRequest

    limits = RunLimits()
    if args.memory_gb is not None:
        if args.memory_gb <= 0:
            raise CliError(f"--memory-gb must be positive, got {args.memory_gb}")
        limits.memory_bytes = int(args.memory_gb * 1024**3)
    limits.disk_bytes = disk_limit(args.disk_limit)
    settings = [item for item in args.env if item.startswith(("FERRY_", "TPX_"))]
    env = sandbox_settings(settings, "--env")
    own = environ.from_args(args, Path(args.path), [item for item in args.env if item not in settings])
    artifacts = _artifacts_dir(args.artifacts, args.path) if args.artifacts else None
    scratch = None
    if _temporary_artifacts(args):
        import tempfile

        scratch = tempfile.TemporaryDirectory(prefix="ferry-run-", ignore_cleanup_errors=True)
        artifacts = Path(scratch.name)
    req = RunRequest(path=args.path, command=cmd, device=args.device, redirect_cuda=args.redirect_cuda,
                     probe=args.probe, profile=args.profile, seed=args.seed, timeout_s=args.timeout,
                     env=env, artifacts_dir=artifacts, keep_workspace=args.keep_workspace,
                     isolation=args.isolation, limits=limits, python=Path(own.python) if own.python else None,
                     user_env=own.env, cwd=own.cwd)
    try:
        result = run_tool(req)
    except RunnerInputError as exc:
        raise CliError(str(exc)) from exc
    finally:
        if scratch is not None:
            scratch.cleanup()
    if scratch is not None:  # its paths are gone: the result does not name them
        result = result.model_copy(update={"artifacts_dir": None, "redirect_log_path": None})
    print(result.model_dump_json(indent=2) if args.json else _render(result))
    return 0 if result.status == "ok" else 1
