"""Rich progress display and the final summary shared by migrate / resume / pr."""

from __future__ import annotations

import json
import re
import sys
from typing import TYPE_CHECKING, Any

from agent.migration.facade import INTERRUPT

if TYPE_CHECKING:
    from rich.status import Status

    from agent.migration.facade import MigrationSnapshot, NodeUpdate


def plain(text: Any) -> str:
    """Text that may come from a run (trace messages, stderr, test names) as rich prints it
    literally: no terminal escape sequences or control characters, no rich markup."""
    from rich.markup import escape

    from tools.textsafe import terminal

    return escape(terminal(str(text)))

NEXT_LABEL = {
    "ingest": "reference run (original code, CUDA -> CPU)", "reference_run": "scanning",
    "scan": "planning", "plan": "applying codemods", "rewrite": "target run on tpx",
    "target_run": "checking the result", "tests": "profiling", "diagnose": "fixing",
    "llm_fix": "applying the model's edit",
    "apply_fix": "target run on tpx", "parity": "tests / profiling", "profile": "writing the report",
    "profile_llm": "applying the model's profile change", "profile_verdict": "writing the report",
    "profile_revert": "writing the report",
}


#: a step's summary that reports a failure Ferry goes on to handle (a diagnosis, a fix, another run)
_SETBACK = re.compile(r"^(parity fails|run failed|tests failed|reference failed|fail:|stopped:|internal error|"
                      r"model: |nothing to compare|the model's (edit|profile change) .*(rejected|reverted)|"
                      r"the model could not)")
MARK = {"ok": "[green]✓[/green]", "warn": "[yellow]![/yellow]", "fail": "[red]✗[/red]"}


def step_outcome(summary: str, status: object) -> str:
    """``fail`` when the step ended the migration short of ``migrated``, ``warn`` when it reports a
    failure the migration goes on to handle (parity fails -> a rule, a run failed -> a diagnosis),
    else ``ok``: the mark a step gets follows what it says, never a check beside "parity fails"."""
    if status and status != "migrated":
        return "fail"
    return "warn" if _SETBACK.search(summary) else "ok"


def step_line(node: str, summary: str) -> str:
    """``node summary`` in rich markup, the node's name said once ("parity fails", not "parity parity fails")."""
    text = plain(summary)
    if summary == node or summary.startswith((node + " ", node + ";")):
        return f"[bold]{node}[/bold]{text[len(plain(node)):]}"
    return f"[bold]{node}[/bold] {text}".rstrip()


class TerminalProgress:
    """One line per finished graph node on stderr, with a spinner for the running one."""

    def __init__(self, enabled: bool = True) -> None:
        from rich.console import Console

        self.console = Console(stderr=True, highlight=False)
        self.enabled = enabled
        self._status: Status | None = None

    def __enter__(self) -> TerminalProgress:
        if self.enabled:
            self._status = self.console.status("ingesting the repository")
            self._status.__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        if self._status is not None:
            self._status.__exit__(None, None, None)

    def __call__(self, node: str, update: NodeUpdate) -> None:
        if not self.enabled:
            return
        if node == INTERRUPT:
            self.console.print("[yellow]waiting for approval[/yellow]")
            return
        for s in update.steps:
            self.console.print(f"{MARK[step_outcome(s.summary, update.status)]} {step_line(s.node, s.summary)} "
                               f"[dim]({s.seconds:.1f}s)[/dim]")
        if self._status is not None and node in NEXT_LABEL:
            self._status.update(NEXT_LABEL[node])


def print_interrupts(state: MigrationSnapshot, as_json: bool) -> None:
    mid = state.migration_id
    if as_json:
        print(json.dumps({"migration_id": mid, "status": "awaiting_approval",
                          "interrupts": [q.data() for q in state.interrupts]}, indent=2))
        return
    from rich.console import Console
    from rich.syntax import Syntax

    from tools.textsafe import terminal

    console = Console()
    for q in state.interrupts:
        if q.type == "approve_cost":
            extra = q.data()
            console.print(f"[bold yellow]Approval needed[/bold yellow]: {plain(q.reason)}")
            spent, cap = float(extra.get("spent_usd") or 0), float(extra.get("cap_usd") or 0)
            console.print(f"spent ${spent:.4f} of the ${cap:.4f} cap; answer with: ferry resume {mid} "
                          "--allow-cost USD | --reject")
            continue
        console.print(f"[bold yellow]Approval needed[/bold yellow] for {plain(q.rule)} "
                      f"at {plain(q.site)} "
                      f"({plain(q.kind)})")
        console.print(f"reason: {plain(q.reason)}")
        console.print(Syntax(terminal(q.diff or ""), "diff"))
    console.print(f"Answer with: ferry resume {mid} --approve | --reject | --edit PATH=FILE")


def print_result(state: MigrationSnapshot, as_json: bool) -> None:
    outputs = state.outputs
    if as_json:
        if outputs is not None:
            with open(outputs.result, encoding="utf-8") as fh:
                print(fh.read())
        else:
            print(json.dumps({"migration_id": state.migration_id, "status": state.status,
                              "summary": state.summary, "pending": state.pending}, indent=2))
        return
    from rich.console import Console
    from rich.table import Table

    console = Console()
    t = Table(show_header=False, title=f"migration {state.migration_id}")
    colour = "green" if state.status == "migrated" else "red"
    t.add_row("status", f"[{colour}]{state.status}[/{colour}]")
    t.add_row("summary", plain(state.summary or ""))
    t.add_row("iterations", str(state.iteration))
    t.add_row("runs", str(len(state.runs)))
    t.add_row("LLM calls / tokens", f"{state.llm_calls} / {state.llm_tokens}")
    t.add_row("wall time", f"{state.elapsed_s:.1f}s")
    for k, v in (outputs.model_dump() if outputs is not None else {}).items():
        if v is not None:  # an output this migration does not have (no model: no trajectory) is left out
            t.add_row(k, plain(v))
    console.print(t)


#: ``ferry migrate``/``resume``'s exit status by the migration's status: 0 migrated, 4 an edit the test guard
#: refused (docs/guard.md: a CI job can tell "the fix would weaken the tests" from other failures), 1 any other
EXIT_GUARD_REFUSED = 4


def exit_code(state: MigrationSnapshot) -> int:
    if state.status == "migrated":
        return 0
    return EXIT_GUARD_REFUSED if state.status == "guard_refused" else 1


def is_tty() -> bool:
    return sys.stdin.isatty() and sys.stdout.isatty()
