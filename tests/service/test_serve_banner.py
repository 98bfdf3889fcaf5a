"""``ferry serve`` says where it listens, where the chat page and the API docs are, as it starts."""

from __future__ import annotations

import json
import os
import queue
import re
import signal
import subprocess
import sys
import threading
from pathlib import Path
from typing import IO

from service_client import ROOT, TOKENS


def _serve(tmp_path: Path, *flags: str) -> subprocess.Popen[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("FERRY_LLM", "FERRY_DATABASE", "FERRY_API"))}
    env["FERRY_API_TOKENS"] = ",".join(f"{o}={t}" for o, t in TOKENS.items())
    return subprocess.Popen([sys.executable, "-m", "agent.cli", "serve", "--port", "0", "--workers", "1",
                             "--data-dir", str(tmp_path / "data"), *flags], cwd=ROOT, env=env, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True)


def _lines(stream: IO[str] | None, until: str) -> list[str]:
    """The stream's lines up to the first containing ``until``; fails (never hangs) if it does not come."""
    assert stream is not None
    got: queue.Queue[str] = queue.Queue()
    threading.Thread(target=lambda: [got.put(line) for line in iter(stream.readline, "")], daemon=True).start()
    lines: list[str] = []
    while not lines or until not in lines[-1]:
        try:
            lines.append(got.get(timeout=60))
        except queue.Empty:
            raise AssertionError(f"no {until!r} within 60 s of the start; read {lines}") from None
    return lines


def _stop(proc: subprocess.Popen[str]) -> None:
    os.killpg(proc.pid, signal.SIGKILL)
    proc.communicate(timeout=30)


def test_serve_prints_where_it_listens_and_where_the_page_and_docs_are(tmp_path: Path) -> None:
    proc = _serve(tmp_path)
    try:
        lines = _lines(proc.stdout, "API docs")
    finally:
        _stop(proc)
    assert len(lines) == 3, lines
    got = re.fullmatch(r"listening on (http://127\.0\.0\.1:\d+)\n", lines[0])
    assert got, lines
    url = got.group(1)
    assert not url.endswith(":0")
    assert lines[1].split() == ["chat", "page:", f"{url}/"]
    assert lines[2].split() == ["API", "docs:", f"{url}/docs"]


def test_with_json_stdout_stays_one_json_line_and_the_banner_goes_to_stderr(tmp_path: Path) -> None:
    proc = _serve(tmp_path, "--json")
    try:
        url = json.loads(_lines(proc.stdout, "url")[0])["url"]
        err = "".join(_lines(proc.stderr, "API docs"))
    finally:
        _stop(proc)
    assert f"listening on {url}\n" in err and f"{url}/docs" in err
