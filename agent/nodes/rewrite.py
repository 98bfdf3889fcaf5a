"""rewrite: apply the catalogue codemods (computed from the ORIGINAL, so re-running is idempotent)."""

from __future__ import annotations

import logging
from typing import Any

from agent import toolbox
from agent.nodes.common import ensure_workspace, source_of, step
from agent.policy.rules_cuda import rewritten_texts
from agent.state import MigrationState, options_of
from tools.patch import file_diff, read_text

logger = logging.getLogger(__name__)


@step("rewrite")
def rewrite(state: MigrationState) -> dict[str, Any]:
    if any(e.get("kind") == "codemod" and e.get("step") == "rewrite" for e in state.get("edits") or []):
        return {"_summary": "already done"}
    opts = options_of(state)
    source = source_of(state)
    result = toolbox.rewrite(source, device=opts.device)
    new_files = rewritten_texts(result, str(source))
    by_file_rules: dict[str, list[str]] = {}
    for entry in result.get("files", []) or []:
        path = entry.get("path") or entry.get("file")
        rules = entry.get("applied_rules") or entry.get("applied") or entry.get("rules") or []
        by_file_rules[path] = sorted({r if isinstance(r, str) else str(r.get("rule_id") or r.get("id")) for r in rules})
    edits = []
    for rel, text in sorted(new_files.items()):
        diff = file_diff(rel, read_text(source / rel), text)
        edits.append({"step": "rewrite", "kind": "codemod", "rule": ",".join(by_file_rules.get(rel, [])) or "codemods",
                      "files": [rel], "diff": diff, "reason": "catalogue codemods (CUDA_IDIOMS.md)"})
    update: dict[str, Any] = {"files": new_files, "edits": edits}
    merged = {**(state.get("files") or {}), **new_files}
    ws = ensure_workspace({**state, "files": merged})  # type: ignore[typeddict-item]
    update["workspace"] = str(ws)
    warnings = result.get("warnings") or []
    update["_summary"] = f"rewrote {len(new_files)} files" + (f"; {len(warnings)} warnings" if warnings else "")
    return update
