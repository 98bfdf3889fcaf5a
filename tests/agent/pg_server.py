"""A real, throwaway PostgreSQL server on loopback for the Postgres checkpointer tests.

``postgres_server`` (session scope) runs ``initdb`` into a fresh temporary directory and starts
the server with ``pg_ctl`` on a free 127.0.0.1 port, from Debian's ``postgresql`` package
(``/usr/lib/postgresql/*/bin``) or, failing that, ``initdb``/``pg_ctl`` on PATH. Postgres refuses
to run as root, so as root the server runs as the ``postgres`` user (or ``nobody``) through
``setpriv``, in a directory that user owns. ``pg_url`` gives each test a database of its own.

Without the server binaries or the ``postgres`` extra the tests are skipped locally and fail
when ``CI`` is set, so CI can never skip them silently.
"""

from __future__ import annotations

import logging
import os
import pwd
import re
import shutil
import socket
import subprocess
import tempfile
from pathlib import Path

import pytest

logger = logging.getLogger(__name__)

SUPERUSER = "ferry"
SERVER_OPTIONS = ("-c fsync=off -c synchronous_commit=off -c full_page_writes=off "  # throwaway data
                  "-c max_connections=50")


class PostgresUnavailable(RuntimeError):
    """The throwaway server cannot be started here (binaries missing, or it failed to start)."""


def in_ci() -> bool:
    return os.environ.get("CI", "").strip().lower() in ("1", "true", "yes")


def skip_or_fail(reason: str) -> None:
    """Skip locally; fail under CI (where the setup installs everything these tests need)."""
    if in_ci():
        pytest.fail(f"{reason} (CI=true: the Postgres tests must run in CI; scripts/setup --dev installs it)")
    pytest.skip(reason)


def find_bin_dir() -> Path | None:
    """The newest ``/usr/lib/postgresql/<version>/bin`` holding initdb and pg_ctl, else the PATH's."""
    def version(p: Path) -> tuple[int, ...]:
        return tuple(int(x) for x in re.findall(r"\d+", p.parent.name)) or (0,)

    candidates = sorted(Path("/usr/lib/postgresql").glob("*/bin"), key=version, reverse=True)
    which = shutil.which("pg_ctl")
    if which:
        candidates.append(Path(which).resolve().parent)
    for d in candidates:
        if (d / "initdb").is_file() and (d / "pg_ctl").is_file() and (d / "postgres").is_file():
            return d
    return None


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class PgServer:
    """One PostgreSQL cluster in a temporary directory, listening on 127.0.0.1 only."""

    def __init__(self, bin_dir: Path) -> None:
        self.bin_dir = bin_dir
        self.root: Path | None = None
        self.port: int | None = None
        self._prefix: list[str] = []
        self._databases = 0

    # --- lifecycle -------------------------------------------------------------------------

    def start(self) -> None:
        self.root = Path(tempfile.mkdtemp(prefix="ferry-pg-"))
        if os.geteuid() == 0:
            self._drop_root()
        self._pg("initdb", "-D", str(self.data), "-A", "trust", "-U", SUPERUSER, "-E", "UTF8", "--locale=C",
                 "--no-sync", timeout=180)
        last = ""
        for _ in range(3):  # the free port can be taken between choosing and binding it
            self.port = free_port()
            opts = f"-c listen_addresses=127.0.0.1 -p {self.port} -k {self.root} {SERVER_OPTIONS}"
            res = self._pg("pg_ctl", "-D", str(self.data), "-l", str(self.log), "-o", opts, "-w", "-t", "120",
                           "start", check=False, timeout=180)
            if res.returncode == 0:
                logger.info("throwaway Postgres on 127.0.0.1:%d (%s)", self.port, self.root)
                return
            last = res.stdout + res.stderr + self.log_tail()
        raise PostgresUnavailable(f"pg_ctl could not start the throwaway server: {last[-2000:]}")

    def stop(self) -> None:
        if self.root is None:
            return
        try:
            if (self.data / "postmaster.pid").exists():
                self._pg("pg_ctl", "-D", str(self.data), "-m", "immediate", "-w", "-t", "60", "stop", check=False,
                         timeout=90)
        finally:
            shutil.rmtree(self.root, ignore_errors=True)
            self.root = None

    def crash(self) -> None:
        """Stop the server the hard way (as a crash would), keeping its data for ``restart``."""
        self._pg("pg_ctl", "-D", str(self.data), "-m", "immediate", "-w", "-t", "60", "stop", timeout=90)

    def restart(self) -> None:
        """Start the crashed server again on the same port and data."""
        opts = f"-c listen_addresses=127.0.0.1 -p {self.port} -k {self.root} {SERVER_OPTIONS}"
        self._pg("pg_ctl", "-D", str(self.data), "-l", str(self.log), "-o", opts, "-w", "-t", "120", "start",
                 timeout=180)

    def _drop_root(self) -> None:
        """Postgres will not run as root: run it as an unprivileged user owning the directory."""
        setpriv = shutil.which("setpriv")
        if setpriv is None:
            raise PostgresUnavailable("running as root and setpriv (util-linux) is missing, so Postgres cannot "
                                      "be started as an unprivileged user")
        for name in ("postgres", "nobody"):
            try:
                user = pwd.getpwnam(name)
            except KeyError:
                continue
            os.chown(self.root, user.pw_uid, user.pw_gid)
            self._prefix = [setpriv, f"--reuid={user.pw_uid}", f"--regid={user.pw_gid}", "--clear-groups", "--"]
            return
        raise PostgresUnavailable("running as root and neither a 'postgres' nor a 'nobody' user exists")

    def _pg(self, tool: str, *args: str, check: bool = True, timeout: float) -> subprocess.CompletedProcess:
        cmd = [*self._prefix, str(self.bin_dir / tool), *args]
        res = subprocess.run(cmd, cwd=self.root, capture_output=True, text=True, timeout=timeout,
                             env={**os.environ, "LC_ALL": "C"})
        if check and res.returncode != 0:
            raise PostgresUnavailable(f"{tool} failed ({res.returncode}): {res.stdout[-1500:]}{res.stderr[-1500:]}")
        return res

    # --- use -------------------------------------------------------------------------------

    @property
    def data(self) -> Path:
        assert self.root is not None
        return self.root / "data"

    @property
    def log(self) -> Path:
        assert self.root is not None
        return self.root / "server.log"

    def log_tail(self) -> str:
        try:
            return self.log.read_text(errors="replace")[-2000:]
        except OSError:
            return ""

    def url(self, dbname: str = "postgres") -> str:
        return f"postgresql://{SUPERUSER}@127.0.0.1:{self.port}/{dbname}"

    def create_database(self, hint: str) -> str:
        """A new, empty database; returns its URL."""
        import psycopg

        self._databases += 1
        name = f"t{self._databases}_" + re.sub(r"[^a-z0-9_]", "_", hint.lower())[:40]
        with psycopg.connect(self.url(), autocommit=True) as conn:
            conn.execute(f'CREATE DATABASE "{name}"')
        return self.url(name)


@pytest.fixture(scope="session")
def postgres_server():
    bin_dir = find_bin_dir()
    if bin_dir is None:
        skip_or_fail("PostgreSQL server binaries (initdb, pg_ctl) not found in /usr/lib/postgresql/*/bin or on "
                     "PATH; install Debian's postgresql package")
    try:
        import langgraph.checkpoint.postgres  # noqa: F401
        import psycopg  # noqa: F401
    except ImportError as exc:
        skip_or_fail(f"Ferry's postgres extra is not installed ({exc}); pip install -e '.[dev]'")
    server = PgServer(bin_dir)
    try:
        server.start()
    except PostgresUnavailable as exc:
        server.stop()
        skip_or_fail(str(exc))
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def pg_url(postgres_server: PgServer, request) -> str:
    """A fresh database on the throwaway server, for this test only."""
    return postgres_server.create_database(request.node.name)
