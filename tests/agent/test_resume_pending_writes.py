"""A crash after a node's writes were saved but before the checkpoint after them: on resume LangGraph
replays those writes (a ``cached`` chunk) without running the node. They are already in the state the
caller loaded, so the progress of the resumed run must not report the node again (the service keys a
session's events by the N-th step: a replayed step would be recorded twice, as the N-th and N+1-th)."""

from __future__ import annotations

import sqlite3
from pathlib import Path

from langgraph.checkpoint.serde.jsonplus import JsonPlusSerializer

from agent.migration.facade import NodeUpdate, load, resume, start
from agent.migration.state import MigrationOptions
from agent.service import events

PROG = '''import torch

x = torch.arange(6, dtype=torch.float32).cuda()
w = torch.ones(6, device="cuda")
for step in range(2):
    print(f"step {step} loss {((x + step) * w).sum().item():.6f}")
'''


def crash_after_writes_of(db_path: Path, thread: str, node: str) -> None:
    """Make the store what a kill -9 leaves between ``node``'s saved writes and the next checkpoint:
    drop every checkpoint after the one ``node`` ran from, and every write made after it."""
    serde = JsonPlusSerializer()
    with sqlite3.connect(db_path) as db:
        ran_from = next(str(cid) for cid, value, kind in db.execute(
            "SELECT checkpoint_id, value, type FROM writes WHERE thread_id=? AND channel='steps' "
            "ORDER BY checkpoint_id", (thread,))
            if any(s.get("node") == node for s in serde.loads_typed((kind, value))))
        db.execute("DELETE FROM checkpoints WHERE thread_id=? AND checkpoint_id>?", (thread, ran_from))
        db.execute("DELETE FROM writes WHERE thread_id=? AND checkpoint_id>?", (thread, ran_from))


def test_writes_saved_before_a_crash_are_applied_once_and_not_reported_again(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    repo.mkdir()
    (repo / "prog.py").write_text(PROG)
    sdir = tmp_path / "state"
    opts = MigrationOptions(source=str(repo), run_command="python prog.py", state_dir=str(sdir))
    finished = start(opts, migration_id="crash")
    assert finished.status == "migrated", finished.summary
    whole = [s.node for s in finished.steps]
    assert "rewrite" in whole

    crash_after_writes_of(sdir / "checkpoints.sqlite", "crash", "rewrite")
    begun = load("crash", sdir)
    done = [s.node for s in begun.steps]
    assert done[-1] == "rewrite" and begun.status is None and begun.pending  # its writes are saved

    reported: list[tuple[str, NodeUpdate]] = []
    final = resume("crash", sdir, progress=lambda node, update: reported.append((node, update)))
    assert final.status == "migrated"
    after = [s.node for s in final.steps]
    assert after[:len(done)] == done and after.count("rewrite") == 1  # applied once, not redone
    nodes = [node for node, _ in reported]
    assert "__metadata__" not in nodes and "rewrite" not in nodes
    assert nodes == after[len(done):]  # exactly the steps this run made, in order

    # the service's events: the loaded state's, then the streamed ones: every step once, keys 0..N-1
    progress = events.SessionProgress(1, begun)
    recorded = events.from_state(1, begun) + [e for node, update in reported for e in progress.events(node, update)]
    step_keys = [key for kind, key, _ in recorded if kind == "step"]
    assert step_keys == [f"a1:step:{i}" for i in range(len(after))]
    assert [data["node"] for kind, _, data in recorded if kind == "step"] == after
