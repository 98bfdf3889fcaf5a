"""agent.migration.handover: a migration's latest checkpoint carried from one store to another (what the
service and its Ray workers exchange), its paths rewritten, a pending question included; anything that is
not one checkpoint of that migration refused."""

from __future__ import annotations

import importlib.util
import json
import sqlite3
from pathlib import Path
from typing import Any, TypedDict

import pytest
from langgraph.checkpoint.sqlite import SqliteSaver
from langgraph.graph import END, START, StateGraph
from langgraph.types import Command, interrupt

from agent.migration import facade, handover


class _State(TypedDict, total=False):
    migration_id: str
    path: str
    answer: str


def _ask(state: _State) -> dict[str, Any]:
    return {"answer": interrupt({"question": "ok?", "site": state["path"] + "/prog.py:7"})}


def _app(saver: Any) -> Any:
    g = StateGraph(_State)
    g.add_node("ask", _ask)
    g.add_edge(START, "ask")
    g.add_edge("ask", END)
    return g.compile(checkpointer=saver)


def _saver(path: Path) -> SqliteSaver:
    saver = SqliteSaver(sqlite3.connect(str(path), check_same_thread=False))
    saver.setup()
    return saver


def test_the_latest_checkpoint_and_its_question_move_to_another_store_with_the_paths_rewritten(tmp_path: Path) -> None:
    here, there = _saver(tmp_path / "a.sqlite"), _saver(tmp_path / "b.sqlite")
    config = {"configurable": {"thread_id": "m1"}}
    _app(here).invoke({"migration_id": "m1", "path": "/srv/data/sessions/s1/repo"}, config)

    text = handover.export_latest(here, "m1", lambda s: s.replace("/srv/data", "/w/data"))
    assert text is not None and "/srv/data" not in text
    handover.import_latest(there, "m1", handover.parse(text, "m1"))

    state = _app(there).get_state(config)
    assert state.values["path"] == "/w/data/sessions/s1/repo"
    assert [i.value for t in state.tasks for i in t.interrupts] == [
        {"question": "ok?", "site": "/w/data/sessions/s1/repo/prog.py:7"}]
    done = _app(there).invoke(Command(resume="yes"), config)  # the question answered in the other store
    assert done["answer"] == "yes"
    assert handover.export_latest(there, "nothing") is None


@pytest.mark.parametrize("text, why", [
    ("not json", "not JSON"),
    (json.dumps({"format": 1, "migration_id": "other", "checkpoint": {}, "metadata": {}, "writes": []}),
     "not a checkpoint of migration m1"),
    (json.dumps({"format": 1, "migration_id": "m1", "checkpoint": {"v": 1}, "metadata": {}, "writes": []}),
     "lacks its parts"),
    (json.dumps({"format": 1, "migration_id": "m1", "metadata": {}, "writes": [],
                 "checkpoint": {"v": 1, "id": "x", "ts": "", "channel_values": {"migration_id": "m2"},
                                "channel_versions": {}, "versions_seen": {}}}), "another migration"),
    (json.dumps({"format": 1, "migration_id": "m1", "metadata": {}, "writes": [["t", "c"]],
                 "checkpoint": {"v": 1, "id": "x", "ts": "", "channel_values": {}, "channel_versions": {},
                                "versions_seen": {}}}), "pending write"),
    (json.dumps({"__ferry_interrupt__": {"value": 1}}), "malformed interrupt"),
])
def test_what_is_not_one_checkpoint_of_the_migration_is_refused(text: str, why: str) -> None:
    with pytest.raises(handover.HandoverRefused, match=why):
        handover.parse(text, "m1")


def test_a_checkpoint_the_check_refuses_is_not_saved(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("FERRY_DATABASE_URL", raising=False)
    source = tmp_path / "a.sqlite"
    _app(_saver(source)).invoke({"migration_id": "m1", "path": "/x"}, {"configurable": {"thread_id": "m1"}})
    text = handover.export_latest(_saver(source), "m1")
    assert text is not None

    def refuse(state: facade.MigrationSnapshot) -> None:
        assert state.values["path"] == "/x"
        raise facade.HandoverRefused("no")

    with pytest.raises(facade.HandoverRefused):
        facade.import_checkpoint("m1", tmp_path / "state", text, check=refuse)
    assert facade.export_checkpoint("m1", tmp_path / "state") is None
    facade.import_checkpoint("m1", tmp_path / "state", text, rewrite=lambda s: s.replace("/x", "/y"))
    assert '"/y"' in (facade.export_checkpoint("m1", tmp_path / "state") or "")


_spec = importlib.util.spec_from_file_location("pg_server_h", Path(__file__).with_name("pg_server.py"))
pg_server = importlib.util.module_from_spec(_spec)  # type: ignore[arg-type]
_spec.loader.exec_module(pg_server)  # type: ignore[union-attr]
postgres_server = pg_server.postgres_server  # fixtures, found by pytest in this module
pg_url = pg_server.pg_url


def test_a_checkpoint_carried_into_the_shared_postgres_store_can_be_answered_there(
        tmp_path: Path, pg_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    from agent.migration.checkpoints import checkpointer

    config = {"configurable": {"thread_id": "m1"}}
    _app(here := _saver(tmp_path / "a.sqlite")).invoke({"migration_id": "m1", "path": "/w/data/x"}, config)
    text = handover.export_latest(here, "m1")
    assert text is not None
    monkeypatch.setenv("FERRY_DATABASE_URL", pg_url)
    facade.import_checkpoint("m1", tmp_path / "state", text, rewrite=lambda s: s.replace("/w/data", "/srv/data"))
    with checkpointer(tmp_path / "state") as saver:
        state = _app(saver).get_state(config)
        assert state.values["path"] == "/srv/data/x"
        assert [i.value["site"] for t in state.tasks for i in t.interrupts] == ["/srv/data/x/prog.py:7"]
        assert _app(saver).invoke(Command(resume="yes"), config)["answer"] == "yes"
