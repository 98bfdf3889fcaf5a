"""A session id in a path is a plain name: anything else is a 404 that says so, looked up nowhere and never
turned into a path under the data dir."""

from __future__ import annotations


def test_a_session_id_that_is_not_a_plain_name_is_a_404_saying_so(serve):
    server = serve()
    c = server.client
    for sid in ("a..b", ".hidden", "x" * 5000, "-rf", "a%20b", "%2e%2e"):
        for method, suffix in (("GET", ""), ("GET", "/patch"), ("GET", "/archive"), ("DELETE", "")):
            r = c.request(method, f"/v1/sessions/{sid}{suffix}")
            assert r.status_code == 404, (sid, method, suffix, r.status_code, r.text[:300])
            assert "not a plain name" in r.json()["detail"] and len(r.text) < 1000
    assert c.get("/v1/sessions/s20250101-000000-abcdef").json()["detail"].startswith("no session")
    assert not (server.data_dir / "sessions").exists() or not any((server.data_dir / "sessions").iterdir())
