"""Requests from another site (issue 34, item 3): against a real `ferry serve` on loopback, a Host that
is not this server (DNS rebinding) is 421 and a write from another Origin is 403, a "simple" upload
without X-Ferry-Request is 403 on a server without tokens; the same requests from this server's own
origin, from httpx and to the webhook keep working."""

from __future__ import annotations

import io
import json
import tarfile

import httpx
from service_client import PLAIN, Server

OPTIONS = json.dumps({"run": "python prog.py"})


def archive() -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        info = tarfile.TarInfo("prog.py")
        info.size = len(PLAIN.encode())
        tar.addfile(info, io.BytesIO(PLAIN.encode()))
    return buf.getvalue()


def upload(c: httpx.Client, **headers: str) -> httpx.Response:
    return c.post("/v1/sessions", files={"archive": ("r.tar.gz", archive(), "application/gzip")},
                  data={"options": OPTIONS}, headers=headers)


def tokenless(serve, *flags: str) -> tuple[Server, httpx.Client]:
    srv = serve(*flags, env={"FERRY_API_TOKENS": ""})
    return srv, httpx.Client(base_url=srv.url, timeout=60)


def test_a_rebound_host_is_refused_and_loopback_names_answer(serve) -> None:
    srv, c = tokenless(serve)
    port = httpx.URL(srv.url).port
    for host in ("evil.example", f"evil.example:{port}", f"127.0.0.1:{port + 1}", "", "a/b"):
        got = c.get("/v1/sessions", headers={"host": host})
        assert got.status_code == 421, (host, got.text)
        assert "--allowed-host" in got.json()["detail"] and "items" not in got.text
    assert c.get("/readyz", headers={"host": "evil.example"}).status_code == 421
    for host in (f"127.0.0.1:{port}", f"localhost:{port}", f"127.0.0.2:{port}", f"LOCALHOST:{port}"):
        assert c.get("/v1/sessions", headers={"host": host}).status_code == 200, host
    assert c.get("/v1/sessions").json()["total"] == 0


def test_an_allowed_host_answers(serve) -> None:
    srv, c = tokenless(serve, "--allowed-host", "ferry.test", "--allowed-host", "other.test:9")
    port = httpx.URL(srv.url).port
    assert c.get("/v1/sessions", headers={"host": f"ferry.test:{port}"}).status_code == 200
    assert c.get("/v1/sessions", headers={"host": "other.test:9"}).status_code == 200
    assert c.get("/v1/sessions", headers={"host": f"other.test:{port}"}).status_code == 421
    got = c.post("/v1/sessions", json={"path": "/nowhere", "options": {"run": "python prog.py"}},
                 headers={"host": f"ferry.test:{port}", "origin": f"http://ferry.test:{port}"})
    assert got.status_code == 400, got.text  # past the checks: refused for its path (no --allow-root)


def test_a_bad_allowed_host_is_a_usage_error(serve, tmp_path) -> None:
    import subprocess
    import sys

    from service_client import ROOT

    res = subprocess.run([sys.executable, "-m", "agent.cli", "serve", "--port", "0", "--data-dir", str(tmp_path / "d"),
                          "--allowed-host", "http://x/y"], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert res.returncode == 2 and "--allowed-host" in res.stderr and "Traceback" not in res.stderr, res.stderr


def test_cross_site_writes_are_refused_and_same_site_ones_pass(serve) -> None:
    srv, c = tokenless(serve)
    own = srv.url
    for origin in ("http://evil.example", "null", f"{own}.evil.example", "http://127.0.0.1:1"):
        got = upload(c, origin=origin, **{"x-ferry-request": "1"})
        assert got.status_code == 403, (origin, got.text)
        assert "another site" in got.json()["detail"]
    got = upload(c, referer="http://evil.example/page.html")
    assert got.status_code == 403, got.text
    # a simple (form) body with neither a same-site Origin nor the custom header
    got = upload(c)
    assert got.status_code == 403 and "X-Ferry-Request" in got.json()["detail"], got.text
    got = c.post("/v1/sessions", content=b'{"path": "/x"}', headers={"content-type": "text/plain"})
    assert got.status_code == 403, got.text
    assert c.get("/v1/sessions").json()["total"] == 0  # nothing of them was created
    # this server's own page (same origin), or a client that says it is one, is served
    assert upload(c, origin=own).status_code == 202
    assert upload(c, **{"x-ferry-request": "1"}).status_code == 202
    assert upload(c, origin=own, referer=f"{own}/").status_code == 202
    assert c.get("/v1/sessions").json()["total"] == 3
    sid = c.get("/v1/sessions").json()["items"][0]["id"]
    assert c.delete(f"/v1/sessions/{sid}", headers={"origin": "http://evil.example"}).status_code == 403
    assert c.delete(f"/v1/sessions/{sid}").status_code == 200  # DELETE: no simple request, no header needed
    # the webhook: no Origin from GitHub, any content type; answered by its own rules (503: not configured)
    hook = c.post("/v1/github/webhook", content=b"a=b", headers={"content-type": "application/x-www-form-urlencoded"})
    assert hook.status_code == 503, hook.text


def test_a_server_with_tokens_checks_the_host_and_origin_but_not_the_header(serve) -> None:
    srv = serve()
    c = srv.client
    assert c.get("/v1/sessions", headers={"host": "evil.example"}).status_code == 421
    assert upload(c, origin="http://evil.example").status_code == 403
    assert upload(c).status_code == 202  # curl -F with a bearer token, as the README shows
