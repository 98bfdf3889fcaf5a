"""``ferry trajectory``: print a migration's recorded trajectory, one block per step (or as JSON)."""

from __future__ import annotations

import argparse
import json

from agent.settings import settings

NAME = "trajectory"
HELP = "print a migration's trajectory: each model request, reply and tool call (--json: the checked lines)"

_CUT = 600


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("ref", metavar="ID|PATH",
                        help="a migration id (its trajectory in the state dir), a trajectory.jsonl or a folder "
                             "holding one")
    parser.add_argument("--state-dir", metavar="DIR", default=settings().paths.state_dir,
                        help="where the migration is, by id (default ~/.ferry or $FERRY_STATE_DIR)")
    parser.add_argument("--full", action="store_true", help="print whole messages (default: cut at 600 characters)")
    parser.add_argument("--json", action="store_true", help="the header and events as a JSON document")


def _cut(text: str | None, full: bool) -> str:
    text = text or ""
    return text if full or len(text) <= _CUT else text[:_CUT] + f"... ({len(text) - _CUT} more characters)"


def run(args: argparse.Namespace) -> int:
    from rich.console import Console
    from rich.markup import escape
    from rich.panel import Panel

    from agent.cli import CliError
    from agent.llm.trajectory import (
        CostStopEvent,
        FailureEvent,
        ReplyEvent,
        RequestEvent,
        ToolEvent,
        TrajectoryError,
        find_trajectory,
        read_trajectory,
    )

    try:
        traj = read_trajectory(find_trajectory(args.ref, args.state_dir))
    except TrajectoryError as exc:
        raise CliError(str(exc)) from None
    if args.json:
        print(json.dumps({"header": traj.header.model_dump(mode="json"),
                          "events": [e.model_dump(mode="json") for e in traj.events]}, indent=2))
        return 0
    console = Console(highlight=False)
    h = traj.header
    console.print(f"[bold]trajectory[/bold] {escape(traj.path)}: migration {escape(h.migration_id or '?')}, model "
                  f"{escape(h.model)} at {escape(h.base_url or 'OpenAI')}, Ferry {escape(h.ferry_version)}, "
                  f"schema {h.schema_version}, started {escape(h.started)}")
    cost = 0.0
    for e in traj.events:
        if isinstance(e, RequestEvent):
            last = e.messages[-1] if e.messages else {}
            body = (f"{len(e.messages)} messages; tools offered: {', '.join(e.tools) or 'none'}\n"
                    f"last ({last.get('role', '?')}): {_cut(str(last.get('content') or ''), args.full)}")
            console.print(Panel(escape(body), title=f"request {e.n} ({e.node or '?'})", title_align="left"))
        elif isinstance(e, ReplyEvent):
            cost += e.cost_usd or 0.0
            priced = f"${e.cost_usd:.6f}" if e.cost_usd is not None else "cost unknown"
            lines = [f"{e.prompt_tokens} prompt + {e.completion_tokens} completion tokens, {priced}, {e.wall_s:.2f} s"]
            if e.content:
                lines.append(_cut(e.content, args.full))
            lines += [f"-> {c.name}({_cut(c.arguments, args.full)})" for c in e.tool_calls]
            console.print(Panel(escape("\n".join(lines)), title=f"reply {e.n}", title_align="left",
                                border_style="green"))
        elif isinstance(e, ToolEvent):
            console.print(Panel(escape(f"{e.name}({_cut(e.arguments, args.full)})\n= {_cut(e.observation, args.full)}"),
                                title=f"tool call {e.id} (reply {e.n}), {e.wall_s:.2f} s", title_align="left",
                                border_style="blue"))
        elif isinstance(e, FailureEvent):
            console.print(Panel(escape(f"{e.failure}{f' (HTTP {e.status})' if e.status else ''}: "
                                       f"{_cut(e.message, args.full)}"),
                                title=f"request {e.n} failed", title_align="left", border_style="red"))
        elif isinstance(e, CostStopEvent):
            console.print(Panel(escape(f"${e.spent_usd:.6f} spent of the ${e.cap_usd:.6f} cap; the next request "
                                       f"could cost up to ${e.next_worst_usd:.6f}: not sent"),
                                title="cost cap reached", title_align="left", border_style="red"))
    console.print(f"{len(traj.requests())} requests, {len(traj.tool_sequence())} tool calls, ${cost:.6f} in all")
    return 0
