"""The Postgres checkpointer (FERRY_DATABASE_URL) against a real throwaway PostgreSQL server.

Real ``ferry migrate`` / ``ferry resume`` subprocesses, the real runner, codemods and tpx
backend; the server comes from ``pg_server.py`` (skipped locally without it, failed under CI).
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from agent.migration.facade import MigrationSnapshot

_spec = importlib.util.spec_from_file_location("pg_server_t", Path(__file__).with_name("pg_server.py"))
pg_server = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(pg_server)
postgres_server = pg_server.postgres_server  # fixtures, found by pytest in this module
pg_url = pg_server.pg_url

ROOT = Path(__file__).resolve().parents[2]
URL_ENV = "FERRY_DATABASE_URL"

# CUDA placement only: the codemods alone migrate it.
PLACEMENT = '''import torch

device = torch.device("cuda")


def main():
    x = torch.arange(6, dtype=torch.float32).cuda()
    w = torch.ones(6, device="cuda")
    for step in range(3):
        total = ((x + step) * w).sum()
        print(f"step {step} loss {total.item():.6f}")


if __name__ == "__main__":
    main()
'''

_progs_spec = importlib.util.spec_from_file_location("agent_test_programs", Path(__file__).with_name("programs.py"))
programs = importlib.util.module_from_spec(_progs_spec)
_progs_spec.loader.exec_module(programs)
POLICY = programs.POLICY_PROGRAM


def _repo(tmp_path: Path, text: str) -> Path:
    repo = tmp_path / "repo"
    repo.mkdir()
    (repo / "prog.py").write_text(text)
    return repo


def _env(url: str | None, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in (URL_ENV, "FERRY_STATE_DIR")}
    if url is not None:
        env[URL_ENV] = url
    env.update(extra)
    return env


def _ferry(url: str | None, *args: str, **extra: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "agent.cli", *args], cwd=ROOT, capture_output=True, text=True,
                          timeout=600, env=_env(url, **extra))


def _sql(url: str, query: str, *params) -> list[tuple]:
    import psycopg

    with psycopg.connect(url, autocommit=True) as conn:
        return conn.execute(query, params).fetchall()


def _checkpoint_ids(url: str, mid: str) -> list[tuple[str, str | None]]:
    """(checkpoint_id, parent_checkpoint_id) of a migration, oldest first."""
    return [(r[0], r[1]) for r in _sql(
        url, "SELECT checkpoint_id, parent_checkpoint_id FROM checkpoints WHERE thread_id = %s "
             "ORDER BY checkpoint_id", mid)]


def _load(url: str, mid: str, sdir: Path) -> MigrationSnapshot:
    """The migration's state as the Postgres checkpointer gives it back (in this process)."""
    from agent.migration.facade import load

    old = os.environ.get(URL_ENV)
    os.environ[URL_ENV] = url
    try:
        return load(mid, sdir)
    finally:
        if old is None:
            os.environ.pop(URL_ENV, None)
        else:
            os.environ[URL_ENV] = old


@pytest.mark.slow
def test_migrate_checkpoints_into_postgres_not_sqlite(tmp_path, pg_url):
    repo = _repo(tmp_path, PLACEMENT)
    sdir = tmp_path / "state"
    res = _ferry(pg_url, "migrate", str(repo), "--run", "python prog.py", "--json", "--state-dir", str(sdir),
                 "--id", "pg-a")
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    assert json.loads(res.stdout)["status"] == "migrated"
    assert not (sdir / "checkpoints.sqlite").exists()  # nothing went to the SQLite store

    tables = {r[0] for r in _sql(pg_url, "SELECT tablename FROM pg_tables WHERE schemaname = 'public'")}
    assert {"checkpoints", "checkpoint_blobs", "checkpoint_writes", "checkpoint_migrations"} <= tables
    ids = _checkpoint_ids(pg_url, "pg-a")
    final = _load(pg_url, "pg-a", sdir)
    assert final.status == "migrated" and final.pending == []
    assert len(ids) > len(programs.steps(final))  # a checkpoint per super-step (and the input)
    # one chain: every checkpoint's parent is the one before it
    assert [p for _, p in ids[1:]] == [c for c, _ in ids[:-1]]
    for table in ("checkpoint_blobs", "checkpoint_writes"):
        assert _sql(pg_url, f"SELECT count(*) FROM {table} WHERE thread_id = %s", "pg-a")[0][0] > 0
    # the edited file is in the stored state, read back through the checkpointer
    assert "cuda" not in final.files["prog.py"]

    listed = _ferry(pg_url, "resume", "--list", "--json", "--state-dir", str(sdir))
    assert listed.returncode == 0 and json.loads(listed.stdout) == ["pg-a"], listed.stderr[-2000:]
    # the same id in another database is unknown: the store is the database, not the state dir
    other = _ferry(pg_url.rsplit("/", 1)[0] + "/postgres", "resume", "pg-a", "--state-dir", str(sdir))
    assert other.returncode == 2 and "no migration 'pg-a' in the Postgres database" in other.stderr


@pytest.mark.slow
def test_kill_9_then_resume_from_postgres_checkpoint(tmp_path, pg_url):
    repo = _repo(tmp_path, POLICY)
    sdir = tmp_path / "state"
    mid = "pg-kill"
    code = programs.migrate_then_kill_9(ROOT, repo, sdir, mid, tmp_path / "out", lambda: _load(pg_url, mid, sdir),
                                        env=_env(pg_url))
    assert code == -signal.SIGKILL
    killed = _load(pg_url, mid, sdir)
    assert killed.pending, "the killed migration must have work left"
    assert killed.status is None
    assert ".float()" in killed.files["prog.py"]  # the policy edit is in the Postgres checkpoint
    assert not (sdir / "checkpoints.sqlite").exists()
    before = _checkpoint_ids(pg_url, mid)
    assert killed.workspace is not None
    shutil.rmtree(killed.workspace)  # it must be rebuilt from the original + the edits in the state

    res = _ferry(pg_url, "resume", mid, "--state-dir", str(sdir), "--json")
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    assert json.loads(res.stdout)["status"] == "migrated"
    final = _load(pg_url, mid, sdir)
    steps = programs.steps(final)
    for node in ("ingest", "reference_run", "scan", "plan", "rewrite", "apply_fix"):
        assert steps.count(node) == 1, f"{node} ran {steps.count(node)} times: {steps}"
    after = _checkpoint_ids(pg_url, mid)
    assert after[:len(before)] == before  # the old checkpoints are kept
    # the resumed run continued from the last checkpoint written before the kill
    assert after[len(before)][1] == before[-1][0]
    assert (repo / "prog.py").read_text() == POLICY  # the original is never written
    patch = (tmp_path / "out" / "ferry.patch").read_text()
    assert "+        total = ((x + step) * w).float().sum()" in patch


def test_setup_is_safe_when_processes_start_together(pg_url):
    """Several processes opening the checkpointer on a fresh database at the same moment."""
    code = textwrap.dedent('''
        import sys
        from pathlib import Path
        from agent.migration.checkpoints import checkpointer
        print("ready", flush=True)
        sys.stdin.readline()
        with checkpointer(Path("/nonexistent")) as saver:  # Postgres: the state dir is not used
            saver.conn.execute("SELECT 1")
        print("ok", flush=True)
    ''')
    procs = [subprocess.Popen([sys.executable, "-c", code], cwd=ROOT, env=_env(pg_url), stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for _ in range(3)]
    try:
        for p in procs:
            assert p.stdout.readline().strip() == "ready", p.stderr.read()[-2000:]
        for p in procs:  # release them all at once
            p.stdin.write("go\n")
            p.stdin.flush()
        outs = [p.communicate(timeout=120) for p in procs]
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
    for p, (out, err) in zip(procs, outs, strict=True):
        assert p.returncode == 0 and out.strip() == "ok", err[-2000:]
    from langgraph.checkpoint.postgres.base import MIGRATIONS

    versions = [r[0] for r in _sql(pg_url, "SELECT v FROM checkpoint_migrations ORDER BY v")]
    assert versions == list(range(len(MIGRATIONS)))


def _no_server_url() -> str:
    return f"postgresql://ferry:s3cret-pw@127.0.0.1:{pg_server.free_port()}/ferry"  # nothing listens there


def _store_error(url: str | None, sdir: Path, **extra: str) -> dict:
    """Open the checkpointer in a fresh interpreter; the error it raises, as a dict."""
    code = textwrap.dedent('''
        import json
        import sys
        from pathlib import Path
        from agent.errors import FerryAgentError
        from agent.migration.checkpoints import checkpointer
        try:
            with checkpointer(Path(sys.argv[1])):
                print(json.dumps({"error": None}))
        except FerryAgentError as exc:
            print(json.dumps({"error": type(exc).__name__, "status": exc.status, "message": str(exc)}))
    ''')
    sdir.mkdir(parents=True, exist_ok=True)
    res = subprocess.run([sys.executable, "-c", code, str(sdir)], cwd=ROOT, capture_output=True, text=True, timeout=120,
                         env=_env(url, **extra))
    assert res.returncode == 0, res.stderr[-2000:]
    return json.loads(res.stdout)


def test_unreachable_server_is_a_clear_error(tmp_path):
    try:
        import psycopg  # noqa: F401
    except ImportError as exc:
        pg_server.skip_or_fail(f"psycopg is not installed ({exc}); pip install -e '.[dev]'")
    url = _no_server_url()
    err = _store_error(url, tmp_path / "probe")
    assert err["error"] == "ToolUnavailable" and err["status"] == "failed_tool_unavailable"
    assert "cannot connect to the Postgres database" in err["message"]

    repo = _repo(tmp_path, PLACEMENT)
    sdir = tmp_path / "state"
    for args in (("migrate", str(repo), "--run", "python prog.py", "--json", "--id", "gone"),
                 ("resume", "gone", "--json")):
        res = _ferry(url, *args, "--state-dir", str(sdir))
        assert res.returncode == 2, (args, res.stdout[-2000:], res.stderr[-2000:])
        assert "Traceback" not in res.stderr and res.stdout == ""
        assert "cannot connect to the Postgres database postgresql://ferry:***@127.0.0.1" in res.stderr
        assert "FERRY_DATABASE_URL" in res.stderr and "start the server or fix the URL" in res.stderr
        assert "s3cret-pw" not in res.stderr  # the password is not echoed
    assert not (sdir / "checkpoints.sqlite").exists()  # no silent fallback to SQLite
    assert not (sdir / "workspaces").exists() or not any((sdir / "workspaces").iterdir())

    bad = _ferry("mysql://x@127.0.0.1/db", "resume", "--list", "--state-dir", str(sdir))
    assert bad.returncode == 2 and "must be a postgresql:// URL" in bad.stderr


def test_missing_postgres_extra_is_tool_unavailable(tmp_path):
    """The extra's import is made to fail in the child interpreter by a sitecustomize."""
    site = tmp_path / "site"
    site.mkdir()
    (site / "sitecustomize.py").write_text(textwrap.dedent('''
        import sys
        BLOCKED = "langgraph.checkpoint.postgres"

        class _Block:
            def find_spec(self, name, path=None, target=None):
                if name == BLOCKED or name.startswith(BLOCKED + "."):
                    raise ModuleNotFoundError(f"No module named {name!r} (blocked by the test)", name=name)
                return None

        sys.meta_path.insert(0, _Block())
    '''))
    pythonpath = os.pathsep.join(p for p in (str(site), os.environ.get("PYTHONPATH", "")) if p)
    url = _no_server_url()  # never contacted: the import fails first
    err = _store_error(url, tmp_path / "probe", PYTHONPATH=pythonpath)
    assert err["error"] == "ToolUnavailable" and err["status"] == "failed_tool_unavailable"
    assert "blocked by the test" in err["message"]
    assert "pip install -e '.[postgres]'" in err["message"]

    repo = _repo(tmp_path, PLACEMENT)
    sdir = tmp_path / "state"
    res = _ferry(url, "migrate", str(repo), "--run", "python prog.py", "--json", "--state-dir", str(sdir),
                 "--id", "noextra", PYTHONPATH=pythonpath)
    assert res.returncode == 2, res.stdout[-2000:] + res.stderr[-2000:]
    assert "langgraph-checkpoint-postgres / psycopg is not installed" in res.stderr
    assert "install Ferry's 'postgres' extra" in res.stderr and "Traceback" not in res.stderr
    assert not (sdir / "checkpoints.sqlite").exists()


@pytest.mark.slow
def test_server_dying_mid_migration_is_a_clear_stop_and_resume_finishes(tmp_path):
    """The Postgres server crashes while a migration runs: `ferry migrate` stops with exit 2 and a
    message naming the store and the resume command (no driver traceback); once the server is
    back, `ferry resume` finishes from the last checkpoint."""
    bin_dir = pg_server.find_bin_dir()
    if bin_dir is None:
        pg_server.skip_or_fail("PostgreSQL server binaries not found; install Debian's postgresql package")
    server = pg_server.PgServer(bin_dir)  # its own cluster: the session's server keeps serving the others
    server.start()
    try:
        url = server.create_database("dying")
        repo = _repo(tmp_path, POLICY)
        sdir = tmp_path / "state"
        mid = "pg-dies"
        proc = subprocess.Popen([sys.executable, "-m", "agent.cli", "migrate", str(repo), "--run", "python prog.py",
                                 "--json", "--state-dir", str(sdir), "--id", mid, "--out", str(tmp_path / "out")],
                                cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=_env(url))
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline and proc.poll() is None:
            try:
                if "rewrite" in programs.steps(_load(url, mid, sdir)):
                    break
            except Exception:  # not checkpointed yet (unknown id), or the read raced a write
                pass
            time.sleep(0.3)
        assert proc.poll() is None, "the migration ended before the server could be stopped"
        server.crash()
        out, err = proc.communicate(timeout=300)
        assert proc.returncode == 2, out[-2000:] + err[-3000:]
        assert "the checkpoint store (the Postgres database" in err
        assert f"run `ferry resume {mid}`" in err
        assert "Traceback" not in err

        server.restart()
        stopped = _load(url, mid, sdir)
        assert stopped.status is None and stopped.pending, "a stopped migration must show work left"
        res = _ferry(url, "resume", mid, "--state-dir", str(sdir), "--json")
        assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
        assert json.loads(res.stdout)["status"] == "migrated"
        steps = programs.steps(_load(url, mid, sdir))
        for node in ("ingest", "reference_run", "scan", "plan", "rewrite"):
            assert steps.count(node) == 1, f"{node} ran {steps.count(node)} times: {steps}"
        assert (repo / "prog.py").read_text() == POLICY
    finally:
        server.stop()


def test_service_is_not_ready_naming_the_store_while_postgres_is_down(tmp_path):
    """`ferry serve` on a Postgres checkpoint store whose server dies: /readyz answers 503 saying the
    store failed (its password hidden), the service itself stays up (its sessions list is its own
    SQLite), and it is ready again once the server is back."""
    import httpx

    bin_dir = pg_server.find_bin_dir()
    if bin_dir is None:
        pg_server.skip_or_fail("PostgreSQL server binaries not found; install Debian's postgresql package")
    server = pg_server.PgServer(bin_dir)
    server.start()
    proc = None
    try:
        url = server.create_database("svc")
        user, rest = url.split("://", 1)[1].split("@", 1)
        # the server trusts loopback: the password only has to stay hidden
        url = f"postgresql://{user}:s3cret-pw@{rest}"
        proc = subprocess.Popen([sys.executable, "-m", "agent.cli", "serve", "--port", "0", "--json", "--data-dir",
                                 str(tmp_path / "state")], cwd=ROOT, env=_env(url), stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True, start_new_session=True)
        line = proc.stdout.readline()
        assert line, proc.stderr.read()[-3000:]
        with httpx.Client(base_url=json.loads(line)["url"], timeout=60) as client:
            deadline = time.monotonic() + 120  # a hang guard: uvicorn accepts shortly after binding
            while True:
                try:
                    if client.get("/healthz").status_code == 200:
                        break
                except httpx.TransportError:
                    assert time.monotonic() < deadline and proc.poll() is None
                    time.sleep(0.1)
            ready = client.get("/readyz")
            assert ready.status_code == 200 and ready.json()["checks"]["database"] == "ok", ready.text
            assert "Postgres" in client.get("/v1/ready").json()["checks"]["database"]  # the details
            server.crash()
            r = client.get("/readyz")
            assert r.status_code == 503, r.text
            assert r.json()["checks"]["database"] == "fail" and "s3cret-pw" not in r.text
            r = client.get("/v1/ready")
            assert r.json()["checks"]["database"].startswith("fail") and "s3cret-pw" not in r.text
            assert client.get("/healthz").status_code == 200  # the service did not go down with the store
            assert client.get("/v1/sessions").status_code == 200
            server.restart()
            assert client.get("/readyz").status_code == 200
    finally:
        if proc is not None and proc.poll() is None:
            os.killpg(proc.pid, signal.SIGTERM)
            proc.wait(timeout=30)
        server.stop()
