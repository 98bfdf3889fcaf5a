"""The pull request's title and body (pr.md): a summary, the changes by rule with counts, the parity
table with its values, the profile findings as file:line, a checklist of what is left for a person,
the commits, and the exact command that reproduces it. Run-derived text is escaped (``tools.textsafe``)."""

from __future__ import annotations

import re
from collections import defaultdict

from agent.migration.facade import StateView
from agent.migration.records import Edit, MigrationRecord
from agent.migration.render import (
    cpu_check_section,
    device_work_section,
    guard_section,
    parity_section,
    profile_section,
    review_line,
)
from agent.prbot.pr.models import CommitInfo
from agent.prbot.pr.public import public_text
from tools.textsafe import md_code, md_inline

TITLE = "Migrate CUDA code to device-generic PyTorch (verified on {device})"


def title(device: str) -> str:
    return TITLE.format(device=device)


def _rule_description(rule: str, edit: Edit) -> str:
    if rule.startswith("FRY"):
        from tools.codemods.registry import rule_by_id

        try:
            return _first_clause(str(rule_by_id(rule).DESCRIPTION))
        except (KeyError, AttributeError):
            return "catalogue codemod"
    return _first_clause(edit.reason)


def _first_clause(text: str, limit: int = 140) -> str:
    """A description's first clause (up to ``; `` or a sentence end), at most ``limit`` characters."""
    head = re.split(r"; |\. (?=[A-Z])|\n", text.strip(), maxsplit=1)[0]
    return head if len(head) <= limit else head[: limit - 1].rstrip() + "…"


BY = {"codemod": "codemod", "policy": "policy rule", "llm": "model", "human": "person", "revert": "Ferry (revert)"}


def changes_by_rule(edits: list[Edit]) -> list[str]:
    """| rule | by | sites | files | what |: one row per rule, counted over every edit."""
    sites: dict[str, int] = defaultdict(int)
    files: dict[str, set[str]] = defaultdict(set)
    first: dict[str, Edit] = {}
    for e in edits:
        counts = e.rule_counts or {r: 1 for r in (e.rule.split(",") if e.kind == "codemod" else [e.rule]) if r}
        for rule, n in counts.items():
            sites[rule] += n
            files[rule].update(e.files)
            first.setdefault(rule, e)
    if not sites:
        return ["No changes."]
    out = ["| rule | by | sites | files | what |", "|---|---|---|---|---|"]
    for rule in sorted(sites, key=lambda r: (first[r].kind != "codemod", r)):
        e = first[rule]
        out.append(f"| {md_code(rule, table=True)} | {BY[e.kind]} | {sites[rule]} | "
                   f"{len(files[rule])} | {md_inline(_rule_description(rule, e), keep_code=True, table=True)} |")
    return out


def checklist(state: StateView, result: MigrationRecord) -> list[str]:
    """What a person still has to do, as checkboxes: the findings no rule could fix, then the checks
    Ferry could not make here."""
    items = []
    if result.status != "migrated":
        items.append(f"- [ ] The migration ended **{result.status}**: "
                     f"{md_inline(result.summary or '', keep_code=True)}")
    plan = state.plan
    for item in (plan.ordered_review(state.scan) if plan else []):
        items.append("- [ ] " + review_line(item).removeprefix("- "))
    if not result.test_command:
        items.append("- [ ] No test command was given, so no tests ran on the accelerator: run `ferry pr` again "
                     "with `--test` (the command that runs the repository's tests)")
    if result.cpu_check is not None and result.cpu_check.passed is None:
        items.append("- [ ] The original does not run on CPU, so the CPU path could not be checked here")
    items.append("- [ ] Run the migrated code once on a CUDA machine: Ferry verified CPU and the accelerator, "
                 "not CUDA itself")
    return items


def pr_body(state: StateView, result: MigrationRecord, *, branch: str | None, base: str, device: str,
            commits: list[CommitInfo], reproduce: str, note: str | None = None, directory: str = "") -> str:
    """pr.md. The same result gives the same text (no timings, no paths of this machine: a weekly job
    that finds nothing new leaves the pull request as it is); ``directory``: the migrated directory,
    relative to the repository ("" for its root)."""
    lines = [f"# {title(device)}", "", "## Summary", ""]
    status = result.status
    if branch:
        lines.append(f"Branch `{branch}` onto `{base}`, made by `ferry pr`: "
                     f"{len(result.patch_files)} files changed, {len(result.edits)} edits, "
                     f"{len(commits)} commits.")
    elif status == "migrated":
        lines.append(f"No branch: `{base}` needed no changes.")
    else:
        lines.append(f"No branch was made: the migration of `{base}` ended with status `{status}`.")
    if directory:
        lines += ["", f"Ferry migrated the directory {md_code(directory + '/')}; the file names below are "
                      "relative to it."]
    lines += ["", f"**Status:** {status} — {md_inline(result.summary or '', keep_code=True)}", "",
              f"- iterations: {result.iterations}, runs: {len(result.run_log)}, model calls: {result.llm.calls}",
              *device_work_section(state.values)]
    if note:
        lines.append(f"- note: {md_inline(note, keep_code=True)}")
    lines += ["", "## Changes by rule", "", *changes_by_rule(state.edits)]
    if any(e.kind == "codemod" for e in state.edits):
        lines += ["", "Each `FRY` rule is described under its id in Ferry's documentation: `docs/idioms.md#fry001` "
                      "for FRY001, and so on; when outputs count as equal: `docs/numerics.md`."]
    lines += ["", "## Changed files", ""]
    lines += [f"- {md_code(f.path)} ({f.change}, +{f.added_lines} -{f.removed_lines})"
              for f in result.patch_files] or ["None."]
    lines += ["", f"## Parity (original on CPU vs migrated on {device})", "", *parity_section(state.parity)]
    lines += ["", "## CPU check (the migrated code on CPU vs the reference)", "",
              *cpu_check_section(state.values, timings=False)]
    lines += ["", "## Test guard (tests before and after)", "", *guard_section(state.values, link=False)]
    lines += ["", "## Profile findings", "", *profile_section(state.profile, state.profile_error)]
    lines += ["", "## Left for a human", "", *checklist(state, result)]
    if commits:
        lines += ["", "## Commits", ""]
        lines += [f"- `{c.sha[:10]}` {md_inline(c.subject)}" for c in commits]
    text = public_text("\n".join(lines), directory)  # the run-derived texts quote the sandbox's paths
    return "\n".join([text, "", "## Reproduce", "", "From the repository's root:", "", "```sh", reproduce, "```", ""])
