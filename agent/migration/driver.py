"""Driving the compiled migration graph: stream it until it ends or interrupts, and read its snapshot.

Used by :mod:`agent.migration.facade` only; ``graph`` builds the graph, this module runs it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from agent.migration.snapshot import INTERRUPT, MigrationSnapshot, NodeUpdate, ProgressFn, approval_requests

if TYPE_CHECKING:
    from agent.migration.graph import MigrationContext


def config_for(migration_id: str) -> dict[str, Any]:
    return {"configurable": {"thread_id": migration_id}, "recursion_limit": 200}


def drive(app: Any, payload: Any, migration_id: str, context: MigrationContext,
          progress: ProgressFn | None = None) -> MigrationSnapshot:
    """Run the compiled graph until it ends or interrupts; return its snapshot."""
    cfg = config_for(migration_id)
    for chunk in app.stream(payload, cfg, context=context, stream_mode="updates", durability="sync"):
        if (chunk.get("__metadata__") or {}).get("cached"):
            # writes saved before a crash, replayed on resume: the state the caller loaded already
            # holds them (get_state applies pending writes), so they are not progress of this run
            continue
        for node, update in chunk.items():
            if node == "__metadata__" or progress is None:
                continue
            if node != INTERRUPT:
                progress(node, NodeUpdate(update or {}))
            else:
                progress(INTERRUPT, NodeUpdate(interrupts=approval_requests([getattr(i, "value", i) for i in update])))
    return snapshot(app, migration_id)


def snapshot(app: Any, migration_id: str) -> MigrationSnapshot:
    """The saved state plus ``pending`` (the nodes still to run or finish) and ``interrupts``
    (waiting questions).

    When Ferry or the checkpoint store died after a node's writes were saved but before the next
    checkpoint, LangGraph lists no next node although the graph has not ended (no status yet);
    those nodes are reported as pending: driving the graph again applies their writes and goes on.
    """
    st = app.get_state(config_for(migration_id))
    view = MigrationSnapshot(dict(st.values or {}))
    pending = list(st.next or ())
    if not pending and view.migration_id and view.status is None:
        pending = [t.name for t in (st.tasks or ())]
    interrupts = [i.value for t in (st.tasks or ()) for i in (getattr(t, "interrupts", ()) or ())]
    return MigrationSnapshot(view.values, pending=pending, interrupts=approval_requests(interrupts))
