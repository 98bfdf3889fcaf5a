"""Answering --approve interrupts from the terminal (or telling the user how to answer later)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from agent.cli.progress import TerminalProgress, is_tty, print_interrupts

if TYPE_CHECKING:
    from agent.migration.facade import ApprovalRequest, MigrationSnapshot, RunScheduler


def parse_edits(specs: list[str]) -> dict[str, str]:
    """``PATH=FILE`` pairs: the repo-relative PATH gets the text of the local FILE."""
    from agent.cli import CliError

    out: dict[str, str] = {}
    for spec in specs:
        if "=" not in spec:
            raise CliError(f"--edit expects PATH=FILE (repo path = file with its new text), got {spec!r}")
        rel, local = spec.split("=", 1)
        p = Path(local).expanduser()
        if not p.is_file():
            raise CliError(f"--edit {spec}: {local} is not a readable file")
        out[rel.strip()] = p.read_text(encoding="utf-8")
    return out


def ask(question: ApprovalRequest) -> dict[str, Any]:
    from rich.prompt import FloatPrompt, Prompt

    if question.type == "approve_cost":  # the model's cost cap is reached: allow another amount?
        suggested = float(question.data().get("suggested_usd") or 0.0) or None
        choice = Prompt.ask("allow more cost for the model, or stop?", choices=["allow", "stop"], default="stop")
        if choice == "stop":
            return {"action": "reject"}
        amount = FloatPrompt.ask("US dollars to allow beyond the cap", default=suggested)
        return {"action": "approve", "amount_usd": amount}
    choice = Prompt.ask("approve, reject or edit?", choices=["approve", "reject", "edit"], default="approve")
    if choice != "edit":
        return {"action": choice}
    rel = Prompt.ask("repository path to replace", default=(question.site or ":").split(":")[0])
    local = Prompt.ask("local file holding its new text")
    return {"action": "edit", "files": {rel: Path(local).expanduser().read_text(encoding="utf-8")}}


def drive_interactively(state: MigrationSnapshot, state_dir: str, as_json: bool,
                        runs: RunScheduler) -> MigrationSnapshot:
    """While the graph waits for approval: ask on a terminal, otherwise print how to answer."""
    from agent.migration.facade import resume

    while state.waiting:
        print_interrupts(state, as_json)
        if as_json or not is_tty():
            return state
        answer = ask(state.interrupts[0])
        with TerminalProgress(enabled=True) as progress:
            state = resume(state.migration_id or "", state_dir, answer=answer, progress=progress, runs=runs)
    return state
