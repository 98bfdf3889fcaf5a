"""ingest: check the repository and make the private workspace."""

from __future__ import annotations

from agent.errors import NeedsHuman
from agent.migration.nodes.common import SUMMARY, Update, counted, ensure_workspace, source_of, step
from agent.migration.runs import RunScheduler
from agent.migration.state import MigrationState, iteration_of, options_of
from tools.patch import list_source_files


@step("ingest")
def ingest(state: MigrationState, runs: RunScheduler) -> Update:
    source = source_of(state)
    if not source.is_dir():
        raise NeedsHuman(f"the repository {source} is gone; it must stay in place during a migration")
    files = list_source_files(source)
    if not any(f.endswith(".py") for f in files):
        raise NeedsHuman(f"{source} holds no Python files; nothing to migrate")
    runs.prewarm_runs(options_of(state).seed)  # once per process: the tpx runs fork from it
    ws = ensure_workspace(state)
    return {"workspace": str(ws), "iteration": iteration_of(state),
            SUMMARY: f"{counted(len(files), 'source file')}; private workspace {ws}"}
