"""/v1 sessions against a real server on loopback: the attacks of issue 14, owners, a whole approved
session (events, approval, outputs), SSE resume, cancel. Real migrations run behind it."""

from __future__ import annotations

import io
import tarfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
from service_client import PLAIN, PROG, create, read_events, wait_state, write_repo

from tools.patch import file_diff


def test_paths_outside_the_allowed_roots_and_bad_bodies_are_refused_with_a_reason(serve, tmp_path: Path) -> None:
    roots = tmp_path / "roots"
    repo = write_repo(roots, "ok")
    (roots / "etc-link").symlink_to("/etc")
    secret = tmp_path / "secret"
    secret.mkdir(mode=0o700)
    (secret / "prog.py").write_text(PROG)
    srv = serve("--allow-root", str(roots))
    c = srv.client
    for path in ("/etc", str(roots / "etc-link"), str(roots / ".." / "secret"), str(secret)):
        got = create(c, path)
        assert got.status_code == 400, (path, got.text)
        assert "allowed root" in got.json()["detail"] and str(roots) in got.json()["detail"]
    # a directory closed to other users inside an allowed root: refused, never republished
    closed = write_repo(roots, "closed")
    (closed / "private").mkdir(mode=0o700)
    (closed / "private" / "key").write_text("TOPSECRET")
    got = create(c, closed)
    assert got.status_code == 400 and "not readable by every user" in got.json()["detail"]
    assert "private" in got.json()["detail"] and "TOPSECRET" not in got.text
    # a client never names where outputs go, nor any other server-side field
    got = c.post("/v1/sessions", json={"path": str(repo), "out": "/etc/ferry", "options": {"run": "python prog.py"}})
    assert got.status_code == 422 and got.json()["detail"][0]["loc"] == ["body", "out"]
    assert not Path("/etc/ferry").exists()
    got = c.post("/v1/sessions", json={"path": str(repo), "options": {"run": "python prog.py", "out_dir": "/tmp/x"}})
    assert got.status_code == 422 and got.json()["detail"][0]["loc"] == ["body", "options", "out_dir"]
    # a binary body: 4xx with what was expected, never a 500
    got = c.post("/v1/sessions", content=bytes(range(256)) * 64, headers={"content-type": "application/json"})
    assert got.status_code == 422 and "not JSON" in got.json()["detail"][0]["msg"]
    got = c.post("/v1/sessions", content=b"\x1f\x8b\x08\x00" * 100, headers={"content-type": "application/x-tar"})
    assert got.status_code == 415 and "multipart/form-data" in got.json()["detail"]
    huge = b"{" + b" " * (2 * 1024**2) + b"}"
    got = c.post("/v1/sessions", content=huge, headers={"content-type": "application/json"})
    assert got.status_code == 413
    got = create(c, repo, run="   ")
    assert got.status_code == 422 and got.json()["detail"][0]["loc"] == ["body", "options", "run"]
    # nothing was created by any of these
    assert c.get("/v1/sessions").json()["total"] == 0
    assert not (srv.data_dir / "sessions").exists() or not any((srv.data_dir / "sessions").iterdir())


def test_a_server_without_allowed_roots_takes_uploads_only(serve, tmp_path: Path) -> None:
    repo = write_repo(tmp_path, "repo")
    got = create(serve().client, repo)
    assert got.status_code == 400 and "--allow-root" in got.json()["detail"]


def test_tokens_and_owners(serve, tmp_path: Path) -> None:
    roots = tmp_path / "roots"
    repo = write_repo(roots, "r", PLAIN)
    srv = serve("--allow-root", str(roots), "--workers", "1")
    sid = create(srv.client, repo).json()["id"]
    nobody, bob = srv.as_owner(None), srv.as_owner("bob")
    assert nobody.get("/v1/sessions").status_code == 401
    wrong = httpx.get(f"{srv.url}/v1/sessions", headers={"authorization": "Bearer alice-token-0002"})
    assert wrong.status_code == 401 and wrong.headers["www-authenticate"] == "Bearer"
    assert bob.get(f"/v1/sessions/{sid}").status_code == 404
    assert bob.get(f"/v1/sessions/{sid}/events").status_code == 404
    assert bob.delete(f"/v1/sessions/{sid}").status_code == 404
    assert bob.post(f"/v1/sessions/{sid}/approval", json={"action": "approve"}).status_code == 404
    assert bob.get("/v1/sessions").json() == {"items": [], "total": 0, "limit": 50, "offset": 0}
    mine = srv.client.get("/v1/sessions").json()
    assert [s["id"] for s in mine["items"]] == [sid] and mine["items"][0]["owner"] == "alice"
    view = wait_state(srv.client, sid, {"finished", "failed"})
    assert view["state"] == "finished" and view["status"] == "migrated", view
    assert srv.client.get("/v1/sessions", params={"status": "finished"}).json()["total"] == 1
    assert srv.client.get("/v1/sessions", params={"status": "queued"}).json()["total"] == 0
    # tokens never reach the log nor the store, even the wrong one tried above
    srv.kill()
    for text in (srv.log.read_bytes(), (srv.data_dir / "service.db").read_bytes()):
        assert b"alice-token-0001" not in text and b"alice-token-0002" not in text
    assert b"session " in srv.log.read_bytes()  # the log itself was written (INFO: session ... created)


def test_an_approved_session_streams_every_event_once_and_serves_its_outputs(serve, tmp_path: Path) -> None:
    roots = tmp_path / "roots"
    repo = write_repo(roots, "prog")
    srv = serve("--allow-root", str(roots))
    c = srv.client
    created = create(c, repo, approve=True)
    assert created.status_code == 202, created.text
    sid = created.json()["id"]
    assert created.json()["events_url"] == f"/v1/sessions/{sid}/events"
    first = read_events(c, sid, until=lambda e: e["event"] == "approval_request")
    assert [e["id"] for e in first] == list(range(1, len(first) + 1))
    kinds = [e["event"] for e in first]
    assert kinds[:2] == ["queued", "started"] and "step" in kinds and "edit" in kinds and "run" in kinds
    question = first[-1]["data"]
    assert question["rule"] == "float64_to_float32" and question["site"] == "prog.py:7"
    assert "+++ b/prog.py" in question["diff"]
    view = wait_state(c, sid, {"waiting_for_approval"})
    assert view["interrupts"][0]["rule"] == "float64_to_float32"
    assert c.get(f"/v1/sessions/{sid}/patch").status_code == 409
    # three answers at once: one wins, the others are told it is no longer waiting
    with ThreadPoolExecutor(3) as pool:
        answers = list(pool.map(lambda a: srv.as_owner("alice").post(f"/v1/sessions/{sid}/approval",
                                                                     json={"action": a}).status_code,
                                ["approve"] * 3))
    assert sorted(answers) == [202, 409, 409], answers
    # resumed after the last event seen: exactly the rest, to the end of the session
    rest = read_events(c, sid, after=first[-1]["id"])
    assert [e["id"] for e in rest] == list(range(first[-1]["id"] + 1, first[-1]["id"] + 1 + len(rest)))
    assert rest[0]["event"] in ("state", "approval_answer")
    assert rest[-1]["event"] == "state" and rest[-1]["data"]["state"] == "finished"
    assert rest[-1]["data"]["status"] == "migrated"
    everything = read_events(c, sid, after=0, header=False)
    assert [e["id"] for e in everything] == list(range(1, len(first) + len(rest) + 1))
    assert [e["data"] for e in everything] == [e["data"] for e in first + rest]
    edits = [e["data"] for e in everything if e["event"] == "edit"]
    assert [e["rule"] for e in edits] == ["FRY001,FRY002,FRY004", "float64_to_float32"]
    view = c.get(f"/v1/sessions/{sid}").json()
    assert view["counts"]["edits"] == 2 and view["counts"]["events"] == len(everything)
    patch = c.get(f"/v1/sessions/{sid}/patch")
    assert patch.status_code == 200 and patch.headers["content-type"].startswith("text/x-diff")
    assert "+++ b/prog.py" in patch.text and ".double()" in patch.text
    assert "parity" in c.get(f"/v1/sessions/{sid}/report").text.lower()
    result = c.get(f"/v1/sessions/{sid}/result").json()
    assert result["status"] == "migrated" and result["result"]["migration_id"] == sid
    with tarfile.open(fileobj=io.BytesIO(c.get(f"/v1/sessions/{sid}/archive").content)) as tar:
        migrated = tar.extractfile(f"{sid}/prog.py").read().decode()  # type: ignore[union-attr]
    assert "current_accelerator" in migrated and ".double()" not in migrated
    assert (repo / "prog.py").read_text() == PROG  # the user's directory is never written
    # cancel a finished session: its workspace goes
    assert (srv.data_dir / "sessions" / sid / "repo").is_dir()
    gone = c.delete(f"/v1/sessions/{sid}")
    assert gone.status_code == 200 and gone.json()["state"] == "cancelled"
    assert not (srv.data_dir / "sessions" / sid).exists()


def test_an_edited_diff_is_applied_instead_of_the_proposal(serve, tmp_path: Path) -> None:
    roots = tmp_path / "roots"
    repo = write_repo(roots, "prog")
    srv = serve("--allow-root", str(roots))
    c = srv.client
    sid = create(c, repo, approve=True).json()["id"]
    wait_state(c, sid, {"waiting_for_approval"})
    bad = c.post(f"/v1/sessions/{sid}/approval", json={"action": "edit", "diff": "--- a/x.py\n+++ b/../x.py\n"})
    assert bad.status_code == 422 and "outside the repository" in bad.text
    before = question_files(c, sid)
    mine = file_diff("prog.py", before, before.replace(".double().sum()", ".sum()  # reviewer"))
    assert c.post(f"/v1/sessions/{sid}/approval", json={"action": "edit", "diff": mine}).status_code == 202
    view = wait_state(c, sid, {"finished", "failed"})
    assert view["status"] == "migrated", view
    result = c.get(f"/v1/sessions/{sid}/result").json()["result"]
    assert [e["kind"] for e in result["edits"]] == ["codemod", "human"]
    assert "# reviewer" in c.get(f"/v1/sessions/{sid}/patch").text


def question_files(c: httpx.Client, sid: str) -> str:
    """prog.py as the proposal found it: the codemods' version (the archive is for finished sessions only)."""
    diff = c.get(f"/v1/sessions/{sid}").json()["interrupts"][0]["diff"]
    old = [ln[1:] for ln in diff.splitlines()[4:] if ln.startswith((" ", "-"))]
    return "\n".join(old) + "\n"


def test_readyz_checks_the_database_and_the_sandbox(serve, tmp_path: Path) -> None:
    srv = serve()
    got = httpx.get(f"{srv.url}/readyz")
    assert got.status_code == 200 and got.json()["checks"] == {"database": "ok", "sandbox": "ok"}
    checks = srv.client.get("/v1/ready").json()["checks"]  # the details, with a token
    assert checks["database"].startswith("ok") and "service.db" in checks["database"]
    assert checks["sandbox"].startswith("ok")


def test_junk_headers_queries_and_bodies_are_4xx_never_500(serve, tmp_path: Path) -> None:
    roots = tmp_path / "roots"
    repo = write_repo(roots, "r", PLAIN)
    srv = serve("--allow-root", str(roots))
    c = srv.client
    sid = create(c, repo).json()["id"]
    for junk in ("\u00b2", "9" * 5000, "-3", "abc"):  # not ids this server sent: ignored, the stream starts at 1
        with c.stream("GET", f"/v1/sessions/{sid}/events", headers={"Last-Event-ID": junk.encode()},
                      timeout=30) as resp:
            assert resp.status_code == 200
            first = next(line for line in resp.iter_lines() if line.startswith("id: "))
            assert first == "id: 1"
    assert c.get("/v1/sessions", params={"offset": 10**20}).status_code == 422
    assert c.get(f"/v1/sessions/{sid}/events", params={"after": -1}).status_code == 422
    deep = "[" * 200_000 + "]" * 200_000
    got = c.post("/v1/sessions", content=deep, headers={"content-type": "application/json"})
    assert got.status_code == 422
    got = c.post("/v1/sessions", files={"archive": ("a.tgz", b"x")}, data={"options": "[" * 30_000})
    assert got.status_code == 422 and got.json()["detail"][0]["loc"] == ["body", "options"]
    lone = c.post(f"/v1/sessions/{sid}/messages", content=b'{"text": "hello \\ud800"}',
                  headers={"content-type": "application/json"})
    assert lone.status_code == 422
    big = c.post(f"/v1/sessions/{sid}/messages", json={"text": "x" * 200_000})
    assert big.status_code == 413 and "larger than this route accepts" in big.json()["detail"]
    chunked = c.post(f"/v1/sessions/{sid}/messages", content=iter([b'{"text": "', b"y" * 100_000, b'"}']),
                     headers={"content-type": "application/json"})
    assert chunked.status_code == 413
    assert c.post(f"/v1/sessions/{sid}/messages", json={"text": "status"}).status_code == 202
    assert "Traceback" not in srv.log.read_text()
