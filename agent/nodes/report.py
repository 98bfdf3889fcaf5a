"""report: decide the final status, write ferry.patch / report.md / result.json, apply if asked."""

from __future__ import annotations

import logging
import subprocess
from pathlib import Path

from agent.errors import Status
from agent.materialise import artifacts_root
from agent.nodes.common import SUMMARY, Update, step
from agent.nodes.reference import cancel_reference
from agent.records import Outputs
from agent.render import report_markdown, result_of
from agent.runs import RunScheduler
from agent.state import MigrationState, dump, options_of, parity_of, status_of
from tools.patch import Patch, PatchRequest, build_patch, git_apply

logger = logging.getLogger(__name__)


def final_status(state: MigrationState) -> tuple[Status, str]:
    """The status the graph decided, or, when it went all the way, what the evidence shows."""
    status, summary = status_of(state), state.get("summary") or ""
    if status is not None:
        return status, summary
    parity = parity_of(state)
    if parity is None:
        return "partial", "the graph ended without a parity verdict"
    if not parity.compared:
        return "partial", ("runs on tpx and the tests pass, but parity could not be shown: the program ran no "
                           "nn.Module, printed no metric and recorded nothing to compare")
    return "migrated", "runs on tpx, tests pass and parity passes"


def _write_outputs(out: Path, final: MigrationState, patch: Patch, applied: bool | None) -> Outputs:
    out.mkdir(parents=True, exist_ok=True)
    (out / "ferry.patch").write_text(patch.diff, encoding="utf-8")
    (out / "report.md").write_text(report_markdown(final, patch.diff), encoding="utf-8")
    result = result_of(final, patch.files, applied)
    (out / "result.json").write_text(result.model_dump_json(indent=2), encoding="utf-8")
    return Outputs(dir=str(out), patch=str(out / "ferry.patch"), report=str(out / "report.md"),
                   result=str(out / "result.json"))


@step("report")
def report(state: MigrationState, runs: RunScheduler) -> Update:
    opts = options_of(state)
    stopped = cancel_reference(state, runs)  # the migration ended before its target run needed it
    runs.cancel_prefix(f"{state['migration_id']}:")  # speculative runs nobody will collect
    status, summary = final_status(state)
    final: MigrationState = {**state, "status": status, "summary": summary}
    patch = build_patch(PatchRequest(original=Path(opts.source), files=dict(state.get("files") or {})))
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
    out_dirs = [artifacts_root(opts.state_dir, state["migration_id"]) / "out"]
    if opts.out_dir:
        out_dirs.append(Path(opts.out_dir).expanduser())
    outputs: Outputs | None = None
    failed: list[str] = []
    for out in out_dirs:
        try:
            outputs = _write_outputs(out, final, patch, applied)  # the last one written: --out when it worked
        except OSError as exc:
            logger.warning("cannot write the outputs to %s: %s", out, exc)
            failed.append(f"{exc.filename or out}: {exc.strerror or exc}")
    if failed:
        where = (f"; a copy is in {outputs.dir}" if outputs else
                 "; nothing was written: free space or fix the permissions and run the migration again")
        summary = (f"the migration ended {status} ({summary}) but its outputs could not be written: "
                   f"{'; '.join(failed)}{where}")
        status = "failed_output"
    return {**stopped, "status": status, "summary": summary, "outputs": dump(outputs) if outputs else None,
            SUMMARY: f"{status}; {len(patch.files)} files in the patch" + ("; applied" if applied else "")}
