"""rewrite: apply the catalogue codemods (computed from the ORIGINAL, so re-running is idempotent)."""

from __future__ import annotations

from collections import Counter

from agent.migration import adapters
from agent.migration.nodes.common import SUMMARY, Update, counted, ensure_workspace, source_of, step
from agent.migration.records import Edit
from agent.migration.runs import RunScheduler
from agent.migration.state import MigrationState, dump, edits_of, files_of, options_of
from agent.policy.rules_cuda import rewritten_texts
from tools.codemods.registry import rule_by_id
from tools.patch import file_diff, read_text


@step("rewrite")
def rewrite(state: MigrationState, runs: RunScheduler) -> Update:
    if any(e.kind == "codemod" and e.step == "rewrite" for e in edits_of(state)):
        return {SUMMARY: "already done"}
    opts = options_of(state)
    source = source_of(state)
    result = adapters.rewrite(source, device=opts.device, skip_rules=opts.skip_rules)
    new_files = rewritten_texts(result, str(source))
    rules_of = {entry.file: sorted(set(entry.applied_rules)) for entry in result.files}
    counts_of = {entry.file: dict(Counter(entry.applied_rules)) for entry in result.files}
    edits = [Edit(step="rewrite", kind="codemod", rule=",".join(rules_of.get(rel, [])) or "codemods", files=[rel],
                  diff=file_diff(rel, read_text(source / rel, source), text),
                  reason="catalogue codemods (docs/codemods.md)",
                  dtype_changes=_dtype_changes(rules_of.get(rel, [])), rule_counts=counts_of.get(rel, {}))
             for rel, text in sorted(new_files.items())]
    merged = {**files_of(state), **new_files}
    ws = ensure_workspace({**state, "files": merged})
    warnings = result.warnings
    skipped = f"; skipped by request: {', '.join(opts.skip_rules)}" if opts.skip_rules else ""
    return {"files": new_files, "edits": [dump(e) for e in edits], "workspace": str(ws),
            SUMMARY: f"rewrote {counted(len(new_files), 'file')}"
            + (f"; {counted(len(warnings), 'warning')}" if warnings else "") + skipped}


def _dtype_changes(rule_ids: list[str]) -> dict[str, str]:
    """The dtypes the applied rules change (FRY029: float64 -> float32), for parity's tiers."""
    changes: dict[str, str] = {}
    for rule_id in rule_ids:
        try:
            changes.update(rule_by_id(rule_id).DTYPE_CHANGES)
        except KeyError:  # not a catalogue rule id (a name the engine reports otherwise)
            continue
    return changes
