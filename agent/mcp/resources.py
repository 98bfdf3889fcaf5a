"""What an agent reads by URI: a finished migration's patch, report and result, and the whole result of a
call whose text was cut.

``ferry://migrations/{id}/patch`` (text/x-diff), ``.../report`` (text/markdown), ``.../result`` (JSON),
``.../files`` (JSON: every file the migration changed, with its migrated text), ``.../runs`` (JSON: each run
of the migration, its role, command, status, exit code, failure signature and times); ``ferry://calls/{call}``
(JSON). Each is the caller's own: another owner's reads as one that does not exist.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

from agent.ids import id_problem
from agent.migration.facade import UnknownMigration, load
from agent.migration.records import MigrationRecord
from agent.service.store import SessionStore

OUTPUTS = {"patch": ("patch", "text/x-diff"), "report": ("report", "text/markdown"),
           "result": ("result", "application/json")}
_MIGRATION = re.compile(r"ferry://migrations/([^/]{1,80})/(patch|report|result|files|runs)")
_CALL = re.compile(r"ferry://calls/([a-z_]{1,20}-\d{8}-\d{6}-[0-9a-f]{8})")
TEMPLATES = [("ferry://migrations/{id}/patch", "patch", "a finished migration's ferry.patch", "text/x-diff"),
             ("ferry://migrations/{id}/report", "report", "a finished migration's report", "text/markdown"),
             ("ferry://migrations/{id}/result", "result", "a finished migration's result.json", "application/json"),
             ("ferry://migrations/{id}/files", "files", "the files a finished migration changed, as it left them",
              "application/json"),
             ("ferry://migrations/{id}/runs", "runs", "a finished migration's runs: role, command, status, times",
              "application/json"),
             ("ferry://calls/{call}", "call", "the whole result of a call whose text was cut", "application/json")]


class ResourceMissing(LookupError):
    """No such resource of the caller's (the message says what to do)."""


def migration_resources(sid: str) -> list[str]:
    return [f"ferry://migrations/{sid}/{which}" for which in (*OUTPUTS, "files", "runs")]


def read(uri: str, owner: str, store: SessionStore, data_dir: Path, calls_dir: Path) -> tuple[str, str]:
    """(text, mime type) of the resource at ``uri`` for ``owner``."""
    m = _MIGRATION.fullmatch(uri)
    if m is not None:
        sid, which = m.groups()
        row = store.get(sid, owner) if id_problem(sid) is None else None
        if row is None:
            raise ResourceMissing(f"no migration {sid!r} of yours on this server")
        if row.state != "finished":
            raise ResourceMissing(f"migration {sid} is {row.state}; its outputs come when it has finished")
        try:
            snapshot = load(row.migration_id, data_dir)
        except UnknownMigration:
            raise ResourceMissing(f"migration {sid}'s checkpoints are gone") from None
        if which == "files":
            return json.dumps(snapshot.files, indent=1, sort_keys=True), "application/json"
        outputs = snapshot.outputs
        if which == "runs":
            path = Path(outputs.result) if outputs is not None else None
            if path is None or not path.is_file():
                raise ResourceMissing(f"migration {sid} finished but its result is gone")
            record = MigrationRecord.model_validate_json(path.read_text(encoding="utf-8"))
            return json.dumps([r.model_dump(mode="json") for r in record.run_log], indent=1), "application/json"
        attr, mime = OUTPUTS[which]
        path = Path(getattr(outputs, attr)) if outputs is not None else None
        if path is None or not path.is_file():
            raise ResourceMissing(f"migration {sid} finished but its {which} is gone")
        return path.read_text(encoding="utf-8"), mime
    m = _CALL.fullmatch(uri)
    if m is not None:
        path = calls_dir / f"{m.group(1)}.json"
        if not path.is_file():
            raise ResourceMissing(f"no call result {m.group(1)!r} of yours on this server")
        return path.read_text(encoding="utf-8"), "application/json"
    raise ResourceMissing(f"unknown resource {uri[:200]!r}; Ferry's look like ferry://migrations/ID/patch "
                          "(or /report, /result) and ferry://calls/CALL")
