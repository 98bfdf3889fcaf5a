"""``ferry replay``: run a migration again from its recorded trajectory, offline, against a scripted server.

The recorded replies are served in order by :class:`agent.llm.scripted.ScriptedLLM` on loopback (real
HTTP, the real ``openai`` client); each request is checked against the recorded one
(:mod:`agent.llm.replay`). The replay is a new migration (id ``<id>-replay``) in its own state dir; at the
end its patch and status are compared with the recorded ``ferry.patch`` and ``result.json`` beside the
trajectory: exit 0 when both are the same, 1 when not (or when a request diverged).
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path
from typing import Any

from agent.settings import settings

NAME = "replay"
HELP = "run a migration again from its trajectory against a scripted model server (offline), compare the patch"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("ref", metavar="ID|PATH",
                        help="a migration id (its trajectory in the state dir), a trajectory.jsonl or a folder "
                             "holding one (an --out)")
    parser.add_argument("--state-dir", metavar="DIR", default=settings().paths.state_dir,
                        help="where the recorded migration is, by id (default ~/.ferry or $FERRY_STATE_DIR)")
    parser.add_argument("--source", metavar="PATH", default=None,
                        help="the repository to migrate (default: the one the trajectory recorded)")
    parser.add_argument("--out", metavar="DIR", default=None,
                        help="where the replay writes ferry.patch, report.md, result.json (default: a temp dir)")
    parser.add_argument("--json", action="store_true", help="print the comparison as JSON")


def _recorded(traj_path: Path) -> tuple[str | None, str | None]:
    """The recorded patch and status beside the trajectory (None where missing)."""
    patch_file, result_file = traj_path.with_name("ferry.patch"), traj_path.with_name("result.json")
    patch = patch_file.read_text(encoding="utf-8") if patch_file.is_file() else None
    status = None
    if result_file.is_file():
        try:
            status = json.loads(result_file.read_text(encoding="utf-8")).get("status")
        except (OSError, ValueError):
            status = None
    return patch, status


def run(args: argparse.Namespace) -> int:
    from agent.cli import CliError, output_dir
    from agent.cli.progress import TerminalProgress
    from agent.llm.replay import RequestMatcher, script_of
    from agent.llm.scripted import ScriptedLLM
    from agent.llm.trajectory import Scrubber, TrajectoryError, find_trajectory, read_trajectory
    from agent.migration.facade import MigrationOptions, RunScheduler, start

    try:
        path = find_trajectory(args.ref, args.state_dir)
        traj = read_trajectory(path)
    except TrajectoryError as exc:
        raise CliError(str(exc)) from None
    try:
        opts = MigrationOptions.model_validate(traj.header.options)
    except ValueError as exc:
        raise CliError(f"{path}, line 1: the header's options are not a migration's ({exc}); record it again") from None
    source = Path(args.source).expanduser() if args.source else Path(opts.source).expanduser()
    if not source.is_dir():
        raise CliError(f"the recorded repository {opts.source} is not here; pass --source PATH")
    recorded_patch, recorded_status = _recorded(path)
    base_id = (traj.header.migration_id or "migration")[:40]
    replay_id = f"{base_id}-replay"
    work = Path(tempfile.mkdtemp(prefix="ferry-replay-"))
    out = output_dir(args.out, "--out") if args.out else work / "out"
    scrubber = Scrubber()
    ids = tuple(i for i in (traj.header.migration_id, replay_id) if i)
    with ScriptedLLM(script_of(traj), one_script=True, check=RequestMatcher(traj, scrubber, ids)) as server:
        replay_opts = opts.model_copy(update={
            "source": str(source.resolve()), "state_dir": str(work / "state"), "out_dir": str(out),
            "llm": True, "llm_base_url": server.base_url, "llm_model": traj.header.model, "apply": False,
            "approve": False})
        try:
            with TerminalProgress(enabled=not args.json) as progress:
                snap = start(replay_opts, migration_id=replay_id, progress=progress, runs=RunScheduler())
        except ValueError as exc:
            raise CliError(str(exc)) from None
        divergence, served, recorded_n = server.divergence, server.served, len(traj.requests())
    patch_file = out / "ferry.patch"
    patch = patch_file.read_text(encoding="utf-8") if patch_file.is_file() else None
    same_patch = recorded_patch is not None and patch == recorded_patch
    same_status = recorded_status is not None and snap.status == recorded_status
    result: dict[str, Any] = {
        "trajectory": str(path), "replay_id": replay_id, "out_dir": str(out), "status": snap.status,
        "recorded_status": recorded_status, "same_status": same_status, "same_patch": same_patch,
        "requests_served": served, "requests_recorded": recorded_n, "divergence": divergence,
        "summary": snap.summary}
    ok = divergence is None and same_patch and same_status and served == recorded_n
    if args.json:
        print(json.dumps(result, indent=2))
    else:
        print(f"replayed {path}: {served} of {recorded_n} recorded requests served; status {snap.status} "
              f"(recorded {recorded_status}); patch {'identical' if same_patch else 'DIFFERENT'}; outputs in {out}")
        if divergence:
            print(divergence, file=sys.stderr)
        if recorded_patch is None:
            print(f"no ferry.patch beside {path} to compare with", file=sys.stderr)
    return 0 if ok else 1
