"""/readyz says only ok or fail (issue 34, item 4): no data dir, no database address, no error text; the
details need a token (GET /v1/ready), and there, in the server's stderr and in its error messages, a
database password never appears, whichever form carries it (user-info, query string, key=value DSN)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import httpx
import pytest
from service_client import ROOT, Server

SECRET = "Sup3r-s3cret-pw"


def test_readyz_names_nothing_and_v1_ready_needs_a_token(serve, tmp_path: Path) -> None:
    srv = serve()
    anon = httpx.get(f"{srv.url}/readyz")
    assert anon.status_code == 200
    assert anon.json() == {"status": "ok", "checks": {"database": "ok", "sandbox": "ok"}}
    assert str(srv.data_dir) not in anon.text and "service.db" not in anon.text
    assert httpx.get(f"{srv.url}/v1/ready").status_code == 401
    details = srv.client.get("/v1/ready")
    assert details.status_code == 200
    assert details.json()["checks"]["database"].startswith("ok: sessions in service.db")


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.mark.parametrize("form", ["query", "userinfo", "sslpassword", "keyvalue", "quoted-keyvalue"])
def test_a_database_password_never_appears_when_the_store_fails(form: str, tmp_path: Path) -> None:
    port = _free_port()  # nothing listens there: the store cannot be opened
    url = {"query": f"postgresql://ferry@127.0.0.1:{port}/postgres?password={SECRET}",
           "userinfo": f"postgresql://ferry:{SECRET}@127.0.0.1:{port}/postgres",
           "sslpassword": f"postgresql://ferry@127.0.0.1:{port}/postgres?sslmode=disable&sslpassword={SECRET}",
           "keyvalue": f"host=127.0.0.1 port={port} user=ferry password={SECRET}",
           "quoted-keyvalue": f"host=127.0.0.1 port={port} password='{SECRET} x'"}[form]
    env = {k: v for k, v in __import__("os").environ.items() if not k.startswith("FERRY_")}
    res = subprocess.run([sys.executable, "-m", "agent.cli", "serve", "--port", "0", "--data-dir",
                          str(tmp_path / "d")], cwd=ROOT, env={**env, "FERRY_DATABASE_URL": url},
                         capture_output=True, text=True, timeout=120)
    assert res.returncode == 2, res.stderr
    assert SECRET not in res.stderr and SECRET not in res.stdout, res.stderr
    assert "***" in res.stderr or "password" not in res.stderr, res.stderr


@pytest.fixture
def postgres(tmp_path: Path):
    sys.path.insert(0, str(ROOT / "tests" / "agent"))
    import pg_server

    bin_dir = pg_server.find_bin_dir()
    if bin_dir is None:
        pg_server.skip_or_fail("PostgreSQL server binaries not found; install Debian's postgresql package")
    try:
        import psycopg  # noqa: F401
    except ImportError as exc:
        pg_server.skip_or_fail(f"psycopg is not installed ({exc})")
    server = pg_server.PgServer(bin_dir)
    server.start()
    try:
        yield server
    finally:
        server.stop()


def test_a_database_password_never_appears_in_readyz_v1_ready_or_the_log(postgres, serve, tmp_path: Path) -> None:
    url = postgres.create_database("redact")  # the server trusts loopback: the password only has to stay hidden
    user, rest = url.split("://", 1)[1].split("@", 1)
    sep = "&" if "?" in rest else "?"
    for n, given in enumerate((f"postgresql://{user}@{rest}{sep}password={SECRET}",
                               f"postgresql://{user}:{SECRET}@{rest}")):
        srv: Server = serve(data_dir=tmp_path / f"d{n}", env={"FERRY_DATABASE_URL": given})
        anon = httpx.get(f"{srv.url}/readyz")
        assert anon.json() == {"status": "ok", "checks": {"database": "ok", "sandbox": "ok"}}, anon.text
        details = srv.client.get("/v1/ready")
        assert details.status_code == 200 and "Postgres" in details.text, details.text
        assert SECRET not in details.text and "***" in details.text
        postgres.crash()
        try:
            anon = httpx.get(f"{srv.url}/readyz")
            assert anon.status_code == 503 and anon.json()["checks"]["database"] == "fail", anon.text
            details = srv.client.get("/v1/ready")
            assert details.status_code == 503 and SECRET not in details.text, details.text
            assert srv.client.get("/v1/sessions").status_code == 200
        finally:
            postgres.restart()
        srv.kill()
        assert SECRET not in srv.log.read_text()
