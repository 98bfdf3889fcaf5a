"""A real `ferry serve` on loopback (its own process group) and helpers to drive it with httpx
(importable from the service tests: conftest.py puts this directory on sys.path)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx

ROOT = Path(__file__).resolve().parents[2]

TOKENS = {"alice": "alice-token-0001", "bob": "bob-token-000002"}

# float64 metric: the codemods place the tensors, the float64 -> float32 policy edit asks for approval.
PROG = '''import torch

device = torch.device("cuda")
x = torch.arange(6, dtype=torch.float32).cuda()
w = torch.ones(6, device="cuda")
for step in range(3):
    total = ((x + step) * w).double().sum()
    print(f"step {step} loss {total.item():.6f}")
'''

# The same program without the float64: migrates with codemods only, no question asked.
PLAIN = PROG.replace(".double()", "")


def auth(owner: str) -> dict[str, str]:
    return {"authorization": f"Bearer {TOKENS[owner]}"}


class Server:
    """`ferry serve --port 0 --json` with the given flags; `client` speaks as alice."""

    def __init__(self, data_dir: Path, *flags: str, env: dict[str, str] | None = None) -> None:
        self.data_dir, self.flags = data_dir, flags
        self.successor: Server | None = None
        base = {k: v for k, v in os.environ.items() if not k.startswith(("FERRY_LLM", "FERRY_DATABASE", "FERRY_API"))}
        base["FERRY_API_TOKENS"] = ",".join(f"{o}={t}" for o, t in TOKENS.items())
        self.env = {**base, **(env or {})}
        self.log = data_dir.parent / f"serve-{time.monotonic_ns()}.log"
        data_dir.parent.mkdir(parents=True, exist_ok=True)
        self._log = self.log.open("w")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "agent.cli", "serve", "--port", "0", "--json", "--data-dir", str(data_dir), *flags],
            cwd=ROOT, env=self.env, stdout=subprocess.PIPE, stderr=self._log, text=True, start_new_session=True)
        line = self.proc.stdout.readline() if self.proc.stdout else ""
        if not line:
            self.proc.wait(timeout=30)
            raise RuntimeError(f"ferry serve did not start: {self.log.read_text()[-3000:]}")
        self.url = json.loads(line)["url"]
        self.client = self.as_owner("alice")
        deadline = time.monotonic() + 120
        while True:  # the socket is bound before uvicorn accepts; wait until it answers
            try:
                if httpx.get(f"{self.url}/healthz", timeout=5).status_code == 200:
                    break
            except httpx.TransportError:
                if time.monotonic() > deadline or self.proc.poll() is not None:
                    raise
            time.sleep(0.1)

    def as_owner(self, owner: str | None) -> httpx.Client:
        return httpx.Client(base_url=self.url, headers=auth(owner) if owner else {}, timeout=60)

    def restart(self) -> Server:
        """Kill this server and start another on its data dir; killing this one kills that one too (the
        fixture that started this one never outlives the restarted server)."""
        self.kill()
        self.successor = Server(self.data_dir, *self.flags, env=self.env)
        return self.successor

    def kill(self, sig: int = signal.SIGKILL) -> None:
        self.client.close()
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, sig)
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(timeout=30)
        if self.proc.stdout:
            self.proc.stdout.close()
        self._log.close()
        if self.successor is not None:
            self.successor.kill()


def write_repo(root: Path, name: str, text: str = PROG) -> Path:
    repo = root / name
    repo.mkdir(parents=True, exist_ok=True)
    (repo / "prog.py").write_text(text)
    return repo


def create(client: httpx.Client, path: Path | str, **options: Any) -> httpx.Response:
    return client.post("/v1/sessions", json={"path": str(path), "options": {"run": "python prog.py", **options}})


def wait_state(client: httpx.Client, sid: str, states: set[str], timeout: float = 240) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    while True:
        got = client.get(f"/v1/sessions/{sid}")
        assert got.status_code == 200, got.text
        view: dict[str, Any] = got.json()
        if view["state"] in states:
            return view
        assert time.monotonic() < deadline, f"session {sid} still {view['state']} after {timeout}s: {view}"
        time.sleep(0.3)


def read_events(client: httpx.Client, sid: str, *, after: int | None = None, header: bool = True,
                until: Callable[[dict[str, Any]], bool] | None = None, timeout: float = 240) -> list[dict[str, Any]]:
    """The SSE stream parsed into {id, event, data}; stops when ``until`` says so or the stream ends."""
    headers = {"Last-Event-ID": str(after)} if (after is not None and header) else {}
    params = {"after": after} if (after is not None and not header) else {}
    out: list[dict[str, Any]] = []
    current: dict[str, Any] = {}
    with client.stream("GET", f"/v1/sessions/{sid}/events", headers=headers, params=params,
                       timeout=httpx.Timeout(timeout, read=timeout)) as resp:
        assert resp.status_code == 200, resp.read()
        assert resp.headers["content-type"].startswith("text/event-stream")
        for line in resp.iter_lines():
            if line.startswith("id: "):
                current["id"] = int(line[4:])
            elif line.startswith("event: "):
                current["event"] = line[7:]
            elif line.startswith("data: "):
                current["data"] = json.loads(line[6:])
            elif line == "" and "id" in current:
                out.append(current)
                if until is not None and until(current):
                    break
                current = {}
    return out
