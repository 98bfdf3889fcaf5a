"""report: decide the final status, write ferry.patch / report.md / result.json, apply if asked."""

from __future__ import annotations

import json
import logging
import subprocess
from pathlib import Path
from typing import Any

from agent import background
from agent.materialise import artifacts_root
from agent.nodes.common import step
from agent.nodes.reference import cancel_reference
from agent.report_render import report_markdown, result_json
from agent.state import MigrationState, options_of
from tools.patch import PatchRequest, build_patch, git_apply

logger = logging.getLogger(__name__)


def _write_outputs(out: Path, final: dict[str, Any], patch: Any, applied: bool | None) -> dict[str, str]:
    out.mkdir(parents=True, exist_ok=True)
    (out / "ferry.patch").write_text(patch.diff, encoding="utf-8")
    (out / "report.md").write_text(report_markdown(final, patch.diff), encoding="utf-8")  # type: ignore[arg-type]
    result = result_json(final, [f.model_dump() for f in patch.files])  # type: ignore[arg-type]
    result["applied"] = applied
    (out / "result.json").write_text(json.dumps(result, indent=2), encoding="utf-8")
    return {"dir": str(out), "patch": str(out / "ferry.patch"), "report": str(out / "report.md"),
            "result": str(out / "result.json")}


@step("report")
def report(state: MigrationState) -> dict[str, Any]:
    opts = options_of(state)
    stopped = cancel_reference(state)  # the migration ended before its target run needed it
    background.cancel_prefix(f"{state['migration_id']}:")  # speculative runs nobody will collect
    status = state.get("status")
    summary = state.get("summary")
    if status is None:
        if state.get("parity") is not None:
            status, summary = "migrated", "runs on tpx, tests pass and parity passes"
        else:
            status, summary = "partial", "the graph ended without a parity verdict"
    final = {**state, "status": status, "summary": summary}
    patch = build_patch(PatchRequest(original=Path(opts.source), files=dict(state.get("files") or {})))
    out_dirs = [artifacts_root(opts.state_dir, state["migration_id"]) / "out"]
    if opts.out_dir:
        out_dirs.insert(0, Path(opts.out_dir).expanduser())
    applied = None
    if opts.apply and status == "migrated" and patch.diff:
        try:
            git_apply(Path(opts.source), patch.diff)
            applied = True
        except subprocess.CalledProcessError as exc:
            applied = False
            summary = f"{summary}; --apply failed: git apply: {exc.stderr.strip()}"
            final["summary"] = summary
    # The state dir's copy first: it is what `ferry resume` and the service read, and where the
    # user finds the outputs when their --out cannot be written.
    out_dirs.reverse()
    outputs: dict[str, str] = {}
    failed: list[str] = []
    for out in out_dirs:
        try:
            written = _write_outputs(out, final, patch, applied)
        except OSError as exc:
            logger.warning("cannot write the outputs to %s: %s", out, exc)
            failed.append(f"{exc.filename or out}: {exc.strerror or exc}")
            continue
        outputs = written  # the last one written: --out when it worked
    if failed:
        where = (f"; a copy is in {outputs['dir']}" if outputs else
                 "; nothing was written: free space or fix the permissions and run the migration again")
        summary = (f"the migration ended {status} ({summary}) but its outputs could not be written: "
                   f"{'; '.join(failed)}{where}")
        status = "failed_output"
    return {**stopped, "status": status, "summary": summary, "outputs": outputs,
            "_summary": f"{status}; {len(patch.files)} files in the patch" + ("; applied" if applied else "")}
