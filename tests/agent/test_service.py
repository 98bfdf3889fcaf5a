"""The HTTP service, driven as a user drives it: `ferry serve` (uvicorn on loopback) and httpx.

Real migrations run behind it (real graph, runner, codemods, tpx backend); nothing is mocked.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

ROOT = Path(__file__).resolve().parents[2]
TOKEN = "s3cret"
AUTH = {"authorization": f"Bearer {TOKEN}"}

# float64 metric: the codemods place the tensors, the float64 -> float32 policy edit needs approval.
PROG = '''import torch

device = torch.device("cuda")
x = torch.arange(6, dtype=torch.float32).cuda()
w = torch.ones(6, device="cuda")
for step in range(3):
    total = ((x + step) * w).double().sum()
    print(f"step {step} loss {total.item():.6f}")
'''

# The reviewer's own version of prog.py, sent with action=edit instead of the proposed edit.
MINE = '''import torch

device = torch.accelerator.current_accelerator(check_available=True) or torch.device("cpu")
x = torch.arange(6, dtype=torch.float32).to(device)
w = torch.ones(6, device=device)
for step in range(3):
    total = ((x + step) * w).sum()  # reviewer: already f32
    print(f"step {step} loss {total.item():.6f}")
'''


class Server:
    """`ferry serve --port 0` in its own process group, with an httpx client on its address."""

    def __init__(self, state_dir: Path) -> None:
        env = {k: v for k, v in os.environ.items() if not k.startswith(("FERRY_LLM", "FERRY_DATABASE"))}
        env["FERRY_API_TOKEN"] = TOKEN
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "agent.cli", "serve", "--port", "0", "--json", "--state-dir", str(state_dir)],
            cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
        line = self.proc.stdout.readline()
        if not line:
            raise RuntimeError(f"ferry serve did not start: {self.proc.stderr.read()[-3000:]}")
        self.url = json.loads(line)["url"]
        self.client = httpx.Client(base_url=self.url, headers=AUTH, timeout=60)
        deadline = time.monotonic() + 120
        while True:  # the socket is bound before uvicorn accepts; wait until it answers
            try:
                if self.client.get("/healthz").status_code == 200:
                    break
            except httpx.TransportError:
                if time.monotonic() > deadline or self.proc.poll() is not None:
                    raise
            time.sleep(0.1)

    def kill(self, sig: int = signal.SIGKILL) -> None:
        self.client.close()
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, sig)
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(timeout=30)


@pytest.fixture(scope="module")
def server(tmp_path_factory) -> Iterator[Server]:
    s = Server(tmp_path_factory.mktemp("service") / "state")
    yield s
    s.kill(signal.SIGTERM)


def _poll(client: httpx.Client, mid: str, until: Any = lambda st: st["state"] != "running") -> dict[str, Any]:
    deadline = time.monotonic() + 600  # a hang guard, not a timing assertion
    while time.monotonic() < deadline:
        r = client.get(f"/migrations/{mid}")
        assert r.status_code == 200, r.text
        st = r.json()
        if until(st):
            return st
        time.sleep(0.1)
    raise AssertionError(f"migration {mid} never reached the expected state: {st}")


def _tree(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def _tiny_repo(tmp_path: Path) -> Path:
    repo = tmp_path / "repo"
    repo.mkdir()
    (repo / "prog.py").write_text(PROG)
    return repo


def _nodes(st: dict[str, Any]) -> list[str]:
    return [s["node"] for s in st["steps"]]


# --- protocol: auth, errors, schema --------------------------------------------------------------


def test_token_is_required_when_configured(server):
    bare = httpx.Client(base_url=server.url, timeout=30)
    assert bare.get("/healthz").json() == {"status": "ok"}  # liveness needs no token
    for method, path in (("GET", "/migrations/abc"), ("POST", "/migrations"), ("GET", "/migrations/abc/result"),
                         ("POST", "/migrations/abc/decision"), ("POST", "/migrations/abc/resume")):
        r = bare.request(method, path, json={})
        assert r.status_code == 401 and "FERRY_API_TOKEN" in r.json()["detail"], (method, path, r.text)
        assert r.headers["www-authenticate"] == "Bearer"
        assert bare.request(method, path, json={}, headers={"authorization": "Bearer wrong"}).status_code == 401
    assert server.client.get("/migrations/abc").status_code == 404


def test_unknown_ids_are_404(server):
    c = server.client
    for r in (c.get("/migrations/nope"), c.get("/migrations/nope/result"),
              c.post("/migrations/nope/decision", json={"action": "approve"}), c.post("/migrations/nope/resume")):
        assert r.status_code == 404 and r.json()["detail"] == "no migration nope", r.text


def test_bad_bodies_are_422_with_a_clear_message(server, tmp_path):
    c = server.client

    def error(r: httpx.Response) -> tuple[list, str]:
        assert r.status_code == 422, r.text
        (err,) = r.json()["detail"]
        return err["loc"], err["msg"]

    loc, msg = error(c.post("/migrations", json={"path": str(tmp_path / "missing"), "run": "python x.py"}))
    assert loc == ["body", "path"] and "is not a directory on the server" in msg
    (tmp_path / "file.py").write_text("x = 1\n")
    loc, msg = error(c.post("/migrations", json={"path": str(tmp_path / "file.py"), "run": "python x.py"}))
    assert loc == ["body", "path"] and "file.py is not a directory" in msg
    for run in ("", "   "):
        loc, msg = error(c.post("/migrations", json={"path": str(tmp_path), "run": run}))
        assert loc == ["body", "run"] and "run must be the command that runs the program" in msg
    loc, msg = error(c.post("/migrations", json={"path": str(tmp_path)}))
    assert loc == ["body", "run"] and msg == "Field required"
    loc, msg = error(c.post("/migrations", json={"path": str(tmp_path), "run": "python x.py", "max_iterations": -1}))
    assert loc == ["body", "max_iterations"]
    # the user's own environment (docs/runner.md): checked before the migration starts
    # a client never makes the server start a binary of its choosing: only the operator's (ferry serve --python)
    evil = tmp_path / "evil-python"
    evil.write_text(f"#!/bin/sh\ntouch {tmp_path / 'ran'}\n")
    evil.chmod(0o755)
    for field, value, text in (("python", str(evil), "interpreters its operator allowed"),
                               ("python", "venv/bin/python", "must be an absolute path"),
                               ("env", {"PATH": "/x"}, "set by the runner"),
                               ("env", {"FERRY_SEED": "1"}, "Ferry's own"),
                               ("cwd", "../up", "inside the repository"), ("cwd", "absent", "not a directory of")):
        loc, msg = error(c.post("/migrations", json={"path": str(tmp_path), "run": "python x.py", field: value}))
        assert loc[:2] == ["body", field] and text in msg, (field, msg)

    assert not (tmp_path / "ran").exists()  # refused without being started

    loc, msg = error(c.post("/migrations/whatever/decision", json={"action": "maybe"}))
    assert loc == ["body", "action"] and "'approve', 'reject' or 'edit'" in msg
    loc, msg = error(c.post("/migrations/whatever/decision", json={"action": "edit"}))
    assert "action=edit needs files" in msg
    loc, msg = error(c.post("/migrations/whatever/decision", json={"action": "approve", "files": {"a.py": "x"}}))
    assert "files go with action=edit only" in msg
    for bad in ("../outside.py", "/etc/passwd"):
        loc, msg = error(c.post("/migrations/whatever/decision", json={"action": "edit", "files": {bad: "x = 1\n"}}))
        assert "relative to the repository" in msg and bad in msg


def test_openapi_is_served_and_every_route_has_response_models(server):
    spec = server.client.get("/openapi.json").json()
    assert spec["info"]["title"] == "Ferry"
    ops = {(m.upper(), p): op for p, item in spec["paths"].items() for m, op in item.items()}
    assert set(ops) == {("GET", "/healthz"), ("POST", "/migrations"), ("GET", "/migrations/{mid}"),
                        ("GET", "/migrations/{mid}/result"), ("POST", "/migrations/{mid}/decision"),
                        ("POST", "/migrations/{mid}/resume")}
    schemas = spec["components"]["schemas"]
    for key, op in ops.items():
        for code, resp in op["responses"].items():
            ref = resp.get("content", {}).get("application/json", {}).get("schema", {}).get("$ref")
            assert ref, f"{key} {code} has no response model"
            assert ref.split("/")[-1] in schemas
        if key[1] != "/healthz":
            assert {"401", "422"} <= set(op["responses"]), key
    assert ops[("GET", "/migrations/{mid}/result")]["responses"]["200"]["content"]["application/json"]["schema"][
        "$ref"].endswith("/MigrationResult")
    assert set(schemas["MigrationResult"]["required"]) >= {"id", "status", "patch", "report", "result"}
    assert schemas["Decision"]["properties"]["action"]["enum"] == ["approve", "reject", "edit"]
    assert server.client.get("/docs").status_code == 200


def test_serve_refuses_bad_setups_with_a_clear_error(tmp_path, monkeypatch, capsys):
    import socket

    from agent.cli import main

    for var in ("FERRY_API_TOKEN", "FERRY_DATABASE_URL"):
        monkeypatch.delenv(var, raising=False)

    def serve(*args: str) -> tuple[int, str]:
        rc = main(["serve", "--state-dir", str(tmp_path / "s"), *args])
        return rc, capsys.readouterr().err

    rc, err = serve("--host", "0.0.0.0")
    assert rc == 2 and "refusing to listen on 0.0.0.0 without a token: set FERRY_API_TOKEN" in err
    (tmp_path / "file").write_text("")
    rc, err = serve("--state-dir", str(tmp_path / "file"))  # the last --state-dir wins
    assert rc == 2 and "give --state-dir a directory Ferry can create and write" in err
    rc, err = serve("--port", "65536")
    assert rc == 2 and "--port must be 0..65535" in err
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        rc, err = serve("--port", str(taken.getsockname()[1]))
    assert rc == 2 and "cannot listen on 127.0.0.1" in err and "pick another --port" in err
    monkeypatch.setenv("FERRY_DATABASE_URL", "postgresql://ferry@127.0.0.1:1/none")
    rc, err = serve("--port", "0")
    assert rc == 2 and "cannot connect to the Postgres database" in err


# --- lifecycle -----------------------------------------------------------------------------------


@pytest.mark.slow
def test_create_wait_approve_result_for_an_eval_repo(server, tmp_path):
    repo = tmp_path / "placement_mlp"
    shutil.copytree(ROOT / "tests" / "fixtures" / "placement_mlp", repo, ignore=shutil.ignore_patterns("__pycache__"))
    before = _tree(repo)
    c = server.client
    r = c.post("/migrations", json={"path": str(repo), "run": "python train.py --steps 2", "approve": True,
                                    "out": str(tmp_path / "out")})
    assert r.status_code == 202, r.text
    mid = r.json()["id"]
    assert r.json()["status_url"] == f"/migrations/{mid}"

    st = _poll(c, mid)
    assert st["state"] == "waiting_for_approval", st
    assert st["pending"] == ["apply_fix"] and st["status"] is None
    (q,) = st["interrupts"]
    assert q["type"] == "approve_edit" and q["rule"] == "matmul_precision_highest" and q["kind"] == "policy"
    assert '+    torch.set_float32_matmul_precision("highest")' in q["diff"] and "matmul precision" in q["reason"]
    assert '+if torch.accelerator.is_available() and torch.accelerator.current_accelerator().type == "tpx":' \
        in q["diff"]  # the target device only
    assert c.get(f"/migrations/{mid}/result").status_code == 409  # no result while waiting
    r = c.post(f"/migrations/{mid}/resume")
    assert r.status_code == 409 and "waiting_for_approval" in r.json()["detail"]

    r = c.post(f"/migrations/{mid}/decision", json={"action": "approve"})
    assert r.status_code == 202 and r.json()["state"] == "running"
    r = c.post(f"/migrations/{mid}/decision", json={"action": "approve"})  # a second answer while it runs
    assert r.status_code == 409 and "not waiting for approval" in r.json()["detail"]

    st = _poll(c, mid)
    assert st["state"] == "finished" and st["status"] == "migrated", st
    assert st["pending"] == [] and st["interrupts"] == [] and st["iteration"] == 1
    assert _nodes(st).count("apply_fix") == 1 and _nodes(st)[-1] == "report"

    res = c.get(f"/migrations/{mid}/result")
    assert res.status_code == 200, res.text
    res = res.json()
    assert res["id"] == mid and res["status"] == "migrated" and res["result"]["migration_id"] == mid
    assert res["patch"] == (tmp_path / "out" / "ferry.patch").read_text()
    assert "diff --git a/train.py b/train.py" in res["patch"]
    assert '+    torch.set_float32_matmul_precision("highest")' in res["patch"]
    assert ".cuda()" not in "".join(ln for ln in res["patch"].splitlines() if ln.startswith("+"))
    assert res["report"].startswith(f"# Ferry migration {mid}") and "matmul_precision_highest" in res["report"]
    assert "| tensor | cosine |" in res["report"]
    policy = [e for e in res["result"]["edits"] if e["kind"] == "policy"]
    assert [e["rule"] for e in policy] == ["matmul_precision_highest"]  # the approved edit is applied
    assert _tree(repo) == before  # apply was not asked: the repository is untouched
    r = c.post(f"/migrations/{mid}/decision", json={"action": "reject"})
    assert r.status_code == 409 and "finished" in r.json()["detail"]


@pytest.mark.slow
def test_reject_stops_with_rejected_and_leaves_the_edit_out(server, tmp_path):
    c = server.client
    mid = c.post("/migrations", json={"path": str(_tiny_repo(tmp_path)), "run": "python prog.py",
                                      "approve": True}).json()["id"]
    st = _poll(c, mid)
    assert st["state"] == "waiting_for_approval" and st["interrupts"][0]["rule"] == "float64_to_float32", st
    assert c.post(f"/migrations/{mid}/decision", json={"action": "reject"}).status_code == 202
    st = _poll(c, mid)
    assert st["state"] == "finished" and st["status"] == "rejected", st
    assert "float64_to_float32" in st["summary"] and "rejected by the reviewer" in st["summary"]
    res = c.get(f"/migrations/{mid}/result").json()
    assert res["status"] == "rejected"
    assert not any(e["kind"] == "policy" for e in res["result"]["edits"])
    assert "float()" not in "".join(ln for ln in res["patch"].splitlines() if ln.startswith("+"))


@pytest.mark.slow
def test_edit_decision_then_server_crash_then_resume(tmp_path):
    """A reviewer's own text replaces the proposal; the server is killed mid-verification and
    a new server on the same state dir shows the migration stopped and resumes it."""
    sdir = tmp_path / "state"
    repo = _tiny_repo(tmp_path)
    first = Server(sdir)
    try:
        c = first.client
        mid = c.post("/migrations", json={"path": str(repo), "run": "python prog.py", "approve": True}).json()["id"]
        st = _poll(c, mid)
        assert st["state"] == "waiting_for_approval", st
        assert "+    total = ((x + step) * w).float().sum()" in st["interrupts"][0]["diff"]
        r = c.post(f"/migrations/{mid}/decision", json={"action": "edit", "files": {"prog.py": MINE}})
        assert r.status_code == 202, r.text
        st = _poll(c, mid, until=lambda s: "apply_fix" in _nodes(s) or s["state"] != "running")
        assert st["state"] == "running", st  # the verification run after the edit is under way
    finally:
        first.kill(signal.SIGKILL)  # the whole server process group, as a crash would

    second = Server(sdir)
    try:
        c = second.client
        st = c.get(f"/migrations/{mid}").json()
        assert st["state"] == "stopped" and st["pending"] and st["status"] is None, st
        assert c.get(f"/migrations/{mid}/result").status_code == 409
        assert c.post(f"/migrations/{mid}/decision", json={"action": "approve"}).status_code == 409
        r = c.post(f"/migrations/{mid}/resume")
        assert r.status_code == 202 and r.json()["state"] == "running"
        st = _poll(c, mid)
        assert st["state"] == "finished" and st["status"] == "migrated", st
        for node in ("ingest", "reference_run", "scan", "rewrite", "apply_fix"):
            assert _nodes(st).count(node) == 1, _nodes(st)  # finished steps were not redone
        res = c.get(f"/migrations/{mid}/result").json()
        assert res["result"]["edits"][-1]["kind"] == "human"
        assert "+    total = ((x + step) * w).sum()  # reviewer: already f32" in res["patch"]
        assert c.post(f"/migrations/{mid}/resume").status_code == 409  # finished: nothing to resume
    finally:
        second.kill(signal.SIGTERM)
    assert (repo / "prog.py").read_text() == PROG


def test_serve_refuses_an_unusable_allowed_interpreter(tmp_path):
    """`ferry serve --python PATH` checks each allowed interpreter before it listens."""
    cmd = [sys.executable, "-m", "agent.cli", "serve", "--port", "0", "--state-dir", str(tmp_path / "s"),
           "--python", str(tmp_path / "no-python")]
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2, proc.stderr
    assert f"--python {tmp_path / 'no-python'}" in proc.stderr and "no such file" in proc.stderr
