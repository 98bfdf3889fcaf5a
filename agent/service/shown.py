"""What a remote user reads of a session names no path of the server: the session's repository copy and
its attempts' private workspaces read as the repository's root (``train.py``), the run artifacts and the
data dir by a placeholder. Applied to the events the workers record, the session's summary and error, and
the chat's replies."""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

from agent.migration.paths import artifacts_root, session_dir, session_repo, workspaces_root
from agent.redact import server_paths
from agent.service.settings import ServiceSettings

Shown = Callable[[str], str]


def migration_ids(sid: str, attempts: int) -> list[str]:
    """The migrations of a session's attempts (attempt N > 1 is ``<sid>-aN``)."""
    return [sid] + [f"{sid}-a{n}" for n in range(2, attempts + 1)]


def session_paths(settings: ServiceSettings, sid: str, attempts: int) -> Shown:
    """The function that takes the server's paths of session ``sid`` out of a text."""
    names: dict[str, str] = {}
    workspace_repos: list[str] = []
    for data in dict.fromkeys((settings.data_dir, settings.data_dir.resolve())):
        names[str(session_repo(data, sid))] = ""
        for mid in migration_ids(sid, max(attempts, 1)):
            ws = str(workspaces_root(data, mid))
            workspace_repos.append(re.escape(ws) + r"/[^/\s'\"]+/repo")
            names[ws] = "<workspace>"
            names[str(artifacts_root(data, mid))] = "<artifacts>"
        names[str(session_dir(data, sid))] = "<session>"
        names[str(data)] = "<server>"
    repos = re.compile("(?:" + "|".join(workspace_repos) + r")(?P<sep>/)?")

    def shown(text: str) -> str:
        text = repos.sub(lambda m: "" if m["sep"] else ".", text)
        return server_paths(text, names)

    return shown


def shown_data(value: Any, shown: Shown) -> Any:
    """``value`` (an event's data: dicts, lists, strings) with ``shown`` applied to every string in it."""
    if isinstance(value, str):
        return shown(value)
    if isinstance(value, dict):
        return {k: shown_data(v, shown) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [shown_data(v, shown) for v in value]
    return value
