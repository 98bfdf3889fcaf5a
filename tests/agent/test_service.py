"""The HTTP service: auth, validation, and a real migration driven through it."""

from __future__ import annotations

import time

from fastapi.testclient import TestClient

from agent.service.app import create_app
from agent.service.deps import Settings

AUTH = {"authorization": "Bearer s3cret"}


def _client(tmp_path) -> TestClient:
    return TestClient(create_app(Settings(state_dir=str(tmp_path / "state"), token="s3cret")))


def test_token_is_required_when_configured(tmp_path):
    c = _client(tmp_path)
    assert c.get("/healthz").json() == {"status": "ok"}
    assert c.get("/migrations/abc").status_code == 401
    assert c.get("/migrations/abc", headers={"authorization": "Bearer wrong"}).status_code == 401
    assert c.get("/migrations/abc", headers=AUTH).status_code == 404


def test_bad_requests_are_rejected(tmp_path):
    c = _client(tmp_path)
    r = c.post("/migrations", json={"path": str(tmp_path / "missing"), "run": "python x.py"}, headers=AUTH)
    assert r.status_code == 422 and "not a directory" in r.json()["detail"]
    r = c.post("/migrations", json={"path": str(tmp_path), "run": ""}, headers=AUTH)
    assert r.status_code == 422


def test_migration_through_the_service(tmp_path):
    repo = tmp_path / "repo"
    repo.mkdir()
    (repo / "prog.py").write_text("import torch\nx = torch.ones(2).cuda()\nraise SystemExit('broken on purpose')\n")
    c = _client(tmp_path)
    r = c.post("/migrations", json={"path": str(repo), "run": "python prog.py"}, headers=AUTH)
    assert r.status_code == 202
    mid = r.json()["id"]
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        st = c.get(f"/migrations/{mid}", headers=AUTH).json()
        if st["state"] == "finished":
            break
        time.sleep(0.5)
    assert st["state"] == "finished", st
    assert st["status"] == "needs_human" and "does not run with CUDA redirected to CPU" in st["summary"]
    assert [s["node"] for s in st["steps"]] == ["ingest", "reference_run", "report"]
    res = c.get(f"/migrations/{mid}/result", headers=AUTH).json()
    assert res["status"] == "needs_human" and res["runs"] == 1
    r = c.post(f"/migrations/{mid}/decision", json={"action": "approve"}, headers=AUTH)
    assert r.status_code == 409  # nothing is waiting for approval
