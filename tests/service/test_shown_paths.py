"""What a remote user reads of a session names no server path (issue 27): the session's repository copy and
its attempts' private workspaces read as the repository's root, the rest of the data dir as placeholders."""

from __future__ import annotations

from pathlib import Path

from agent.service.settings import ServiceSettings
from agent.service.shown import session_paths, shown_data


def test_server_paths_of_a_session_read_as_repository_paths(tmp_path: Path) -> None:
    data = tmp_path / "data"
    shown = session_paths(ServiceSettings(data_dir=data), "s1", attempts=2)
    ws1 = f"{data}/workspaces/s1/ferry-ws-3q70zsz1/repo"
    ws2 = f"{data}/workspaces/s1-a2/ferry-ws-qxa6aaer/repo"
    text = (f"1 source files; private workspace {ws1}\n"
            f'File "{ws2}/pkg/train.py", line 4, in <module>\n'
            f"cd {data}/sessions/s1/repo && python {data}/sessions/s1/repo/train.py\n"
            f"artifacts in {data}/artifacts/s1-a2/run-3, the database {data}/service.db")
    out = shown(text)
    assert str(data) not in out and str(tmp_path) not in out
    assert "private workspace ." in out and 'File "pkg/train.py", line 4' in out
    assert "cd . && python train.py" in out
    assert "<artifacts>/run-3" in out and "<server>/service.db" in out
    assert shown_data({"a": [text, 3], "b": None}, shown) == {"a": [out, 3], "b": None}
    other = session_paths(ServiceSettings(data_dir=data), "s10", attempts=1)  # another session's paths: not its
    assert f"{data}/workspaces/s1/" not in other(f"{data}/workspaces/s10/ferry-ws-x/repo/a.py")
