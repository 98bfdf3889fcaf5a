"""`ferry serve` under load: concurrent sessions, many event-stream readers, API latency, lost events.

    .venv/bin/python benchmarks/service.py                  # 16 sessions, 200 readers (minutes on 2 cores)
    .venv/bin/python benchmarks/service.py --quick          # 4 sessions, 40 readers (smoke run)
    .venv/bin/python benchmarks/service.py --sessions 16 --readers 200 --workers 2
    .venv/bin/python benchmarks/service.py --hosts          # sessions/min, 1 and 2 servers on one Postgres
    .venv/bin/python benchmarks/service.py --hosts --ray local   # the same, migrations as tasks of one Ray cluster

One real server on loopback (a subprocess in its own process group, killed at the end; offline policy,
--workers = the cores unless told, --queue >= the sessions). The sample repos of the synthetic suite
(mlp_training, cnn_training, host_sync_loop, data_dependent_loss, in turn, each with its case's run and
test commands) are copied under the server's --allow-root; half the sessions are created by a multipart
upload of a tar.gz built here, half by JSON `path`, all at once (asyncio + httpx), so most wait in the
queue. Then, concurrently:

  * M event-stream readers spread over the sessions read GET /v1/sessions/{id}/events from the start to
    the stream's end; one in four disconnects midway and reconnects with Last-Event-ID, as a browser does.
    Each reader's ids must be exactly 1..last, and once the session ended what it read must equal what
    `?after=0` returns (same ids, kinds and data);
  * a poller (its own thread and client) times GET /v1/sessions/{id} and GET /v1/sessions every ~100 ms.
    The same is timed idle first, in this run, against a finished warm-up session (one small repo) ->
    p50/p99 loaded, idle, and the ratio.

Printed: sessions and their statuses (expected: migrated), wall time, throughput, latency, events delivered,
lost, duplicated, errors (any non-2xx answer or transport error), reconnects; then the issue's targets (16
sessions, 200 readers, zero errors, zero lost or duplicated events, every session migrated) as met / NOT met
(exit 1 when one is not). Timings are printed, never asserted; the client shares the machine's cores with
the server, so on 2 cores the latency figures include the readers' own parsing.

--hosts: a throwaway PostgreSQL server (tests/agent/pg_server.py; or --database), then rounds of one server
and of two servers (``--database``, one shared data dir, --workers each) on a fresh database each: the
sessions are created over the servers in turn, all at once, and the round's sessions/min is counted from
the first create to the last session's end; each session's ``started`` events say which server ran it
(expected: each exactly once, and both servers used in the two-server round).
"""

from __future__ import annotations

import argparse
import asyncio
import io
import itertools
import json
import os
import shutil
import signal
import subprocess
import sys
import tarfile
import tempfile
import threading
import time
import tomllib
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

ROOT = Path(__file__).resolve().parents[1]
SUITE = ROOT / "evals" / "suite"
CASES = ("mlp_training", "cnn_training", "host_sync_loop", "data_dependent_loss")
TOKEN = "bench-token-000001"
HEADERS = {"authorization": f"Bearer {TOKEN}"}
RECONNECT_EVERY = 4  # one reader in four disconnects midway
WARMUP = '''import torch

x = torch.arange(6, dtype=torch.float32).cuda()
w = torch.ones(6, device="cuda")
for step in range(3):
    print(f"step {step} loss {((x + step) * w).sum().item():.6f}")
'''
Event = tuple[int, str, Any]


@dataclass
class Stats:
    errors: list[str] = field(default_factory=list)
    reconnects: int = 0

    def error(self, what: str) -> None:
        self.errors.append(what)


@dataclass
class Reader:
    sid: str
    reconnect: bool
    events: list[Event] = field(default_factory=list)


# ---- the server -------------------------------------------------------------------------------------------

class Server:
    def __init__(self, data_dir: Path, root: Path, workers: int, queue: int, extra: tuple[str, ...] = (),
                 log_name: str = "serve.log") -> None:
        env = {k: v for k, v in os.environ.items() if not k.startswith(("FERRY_LLM", "FERRY_DATABASE", "FERRY_API"))}
        env["FERRY_API_TOKENS"] = f"bench={TOKEN}"
        self.log_path = data_dir.parent / log_name
        self._log = self.log_path.open("w")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "agent.cli", "serve", "--port", "0", "--json", "--data-dir", str(data_dir),
             "--allow-root", str(root), "--workers", str(workers), "--queue", str(queue), *extra],
            cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=self._log, text=True, start_new_session=True)
        line = self.proc.stdout.readline() if self.proc.stdout else ""
        if not line:
            self.proc.wait(timeout=30)
            raise SystemExit(f"ferry serve did not start:\n{self.log_path.read_text()[-3000:]}")
        self.url: str = json.loads(line)["url"]
        deadline = time.monotonic() + 120
        while True:
            try:
                if httpx.get(f"{self.url}/healthz", timeout=5).status_code == 200:
                    return
            except httpx.TransportError:
                if time.monotonic() > deadline or self.proc.poll() is not None:
                    raise
            time.sleep(0.1)

    def kill(self) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait(timeout=30)
        if self.proc.stdout:
            self.proc.stdout.close()
        self._log.close()


# ---- sessions ---------------------------------------------------------------------------------------------

def case_options(case: str) -> dict[str, Any]:
    meta = tomllib.loads((SUITE / case / "ferry-eval.toml").read_text())
    return {"run": meta["run"], "test": meta.get("test")}


def tar_gz(repo: Path) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        for path in sorted(repo.rglob("*")):
            if path.is_file() and "__pycache__" not in path.parts:
                tar.add(path, arcname=str(path.relative_to(repo)), recursive=False)
    return buf.getvalue()


async def create(client: httpx.AsyncClient, root: Path, n: int, stats: Stats) -> tuple[str, str] | None:
    case = CASES[n % len(CASES)]
    repo = root / f"{n:02d}-{case}"
    shutil.copytree(SUITE / case / "repo", repo, ignore=shutil.ignore_patterns("__pycache__"))
    opts = case_options(case)
    try:
        if n % 2:  # multipart upload
            resp = await client.post("/v1/sessions", files={"archive": (f"{case}.tar.gz", tar_gz(repo),
                                                                        "application/gzip")},
                                     data={"options": json.dumps(opts)})
        else:
            resp = await client.post("/v1/sessions", json={"path": str(repo), "options": opts})
    except httpx.HTTPError as exc:
        stats.error(f"create {case}: {type(exc).__name__}: {exc}")
        return None
    if resp.status_code != 202:
        stats.error(f"create {case}: {resp.status_code} {resp.text[:300]}")
        return None
    return resp.json()["id"], case


def parse_sse(lines: list[str]) -> Event | None:
    ev: dict[str, Any] = {}
    for line in lines:
        if line.startswith("id: "):
            ev["id"] = int(line[4:])
        elif line.startswith("event: "):
            ev["event"] = line[7:]
        elif line.startswith("data: "):
            ev["data"] = json.loads(line[6:])
    return (ev["id"], ev.get("event", ""), ev.get("data")) if "id" in ev else None


async def stream(client: httpx.AsyncClient, sid: str, after: int | None, stop_after: int | None,
                 *, header: bool = True) -> tuple[list[Event], bool]:
    """Events of one connection; (events, ended): ended is False when we hung up after ``stop_after``."""
    headers = {"Last-Event-ID": str(after)} if (after is not None and header) else {}
    params = {"after": after} if (after is not None and not header) else {}
    got: list[Event] = []
    async with client.stream("GET", f"/v1/sessions/{sid}/events", headers=headers, params=params) as resp:
        if resp.status_code != 200:
            raise httpx.HTTPStatusError(f"{resp.status_code} {(await resp.aread())[:300]!r}",
                                        request=resp.request, response=resp)
        block: list[str] = []
        async for line in resp.aiter_lines():
            if line:
                block.append(line)
                continue
            ev = parse_sse(block)
            block = []
            if ev is not None:
                got.append(ev)
                if stop_after is not None and len(got) >= stop_after:
                    return got, False
    return got, True


async def read(client: httpx.AsyncClient, reader: Reader, n: int, stats: Stats) -> None:
    stop_after = 4 + n % 10 if reader.reconnect else None  # midway: after the first few events
    try:
        got, ended = await stream(client, reader.sid, None, stop_after)
        reader.events += got
        while not ended:  # hung up: come back with Last-Event-ID, like EventSource
            stats.reconnects += 1
            await asyncio.sleep(0.5)
            got, ended = await stream(client, reader.sid, reader.events[-1][0] if reader.events else 0, None)
            reader.events += got
    except (httpx.HTTPError, ValueError) as exc:
        stats.error(f"reader {n} of {reader.sid}: {type(exc).__name__}: {exc}")


# ---- latency ----------------------------------------------------------------------------------------------

class Poller(threading.Thread):
    """GET /v1/sessions/{id} and GET /v1/sessions in turn every ~100 ms, timed, from its own thread."""

    def __init__(self, url: str, stats: Stats) -> None:
        super().__init__(daemon=True)
        self.client = httpx.Client(base_url=url, headers=HEADERS, timeout=60)
        self.stats = stats
        self.ids: list[str] = []
        self.samples: list[float] = []
        self.states: dict[str, dict[str, Any]] = {}
        self.halt = threading.Event()

    def run(self) -> None:
        n = 0
        while not self.halt.is_set():
            path = f"/v1/sessions/{self.ids[n // 2 % len(self.ids)]}" if n % 2 == 0 else "/v1/sessions?limit=200"
            t0 = time.perf_counter()
            try:
                resp = self.client.get(path)
                dt = time.perf_counter() - t0
                if resp.status_code == 200:
                    self.samples.append(dt)
                    body = resp.json()
                    for item in body.get("items", [body]):
                        self.states[item["id"]] = item
                else:
                    self.stats.error(f"poll {path}: {resp.status_code} {resp.text[:200]}")
            except httpx.HTTPError as exc:
                self.stats.error(f"poll {path}: {type(exc).__name__}: {exc}")
            n += 1
            self.halt.wait(max(0.0, 0.1 - (time.perf_counter() - t0)))

    def measure(self, seconds: float) -> list[float]:
        self.samples = []
        self.start()
        time.sleep(seconds)
        self.halt.set()
        self.join()
        return self.samples


def pct(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))] * 1000


# ---- the run ----------------------------------------------------------------------------------------------

def warm_up(url: str, root: Path) -> str:
    """One small session to the end: the idle latency is measured against it, the workers are warm."""
    repo = root / "warmup"
    repo.mkdir()
    (repo / "prog.py").write_text(WARMUP)
    with httpx.Client(base_url=url, headers=HEADERS, timeout=60) as c:
        resp = c.post("/v1/sessions", json={"path": str(repo), "options": {"run": "python prog.py"}})
        resp.raise_for_status()
        sid: str = resp.json()["id"]
        deadline = time.monotonic() + 600
        while c.get(f"/v1/sessions/{sid}").json()["state"] not in {"finished", "failed", "cancelled"}:
            if time.monotonic() > deadline:
                raise SystemExit(f"the warm-up session {sid} did not end in 600 s")
            time.sleep(0.5)
    return sid


async def load(url: str, root: Path, args: argparse.Namespace, stats: Stats, poller: Poller
               ) -> tuple[list[tuple[str, str]], list[Reader], dict[str, list[Event]], float]:
    limits = httpx.Limits(max_connections=args.readers + args.sessions + 16, max_keepalive_connections=64)
    timeout = httpx.Timeout(60, read=args.stream_timeout)
    async with httpx.AsyncClient(base_url=url, headers=HEADERS, limits=limits, timeout=timeout) as client:
        t0 = time.perf_counter()
        made = await asyncio.gather(*(create(client, root, n, stats) for n in range(args.sessions)))
        sessions = [m for m in made if m is not None]
        if not sessions:
            return [], [], {}, time.perf_counter() - t0
        poller.ids[:] = [sid for sid, _ in sessions]
        poller.start()
        readers = [Reader(sessions[n % len(sessions)][0], n % RECONNECT_EVERY == RECONNECT_EVERY - 1)
                   for n in range(args.readers)]
        await asyncio.gather(*(read(client, r, n, stats) for n, r in enumerate(readers)))
        wall = time.perf_counter() - t0  # every stream ended: every session ended
        poller.halt.set()
        full: dict[str, list[Event]] = {}
        for sid, _ in sessions:
            try:
                full[sid], _ended = await stream(client, sid, 0, None, header=False)
            except httpx.HTTPError as exc:
                stats.error(f"after=0 of {sid}: {type(exc).__name__}: {exc}")
    return sessions, readers, full, wall


def check_reader(r: Reader, full: list[Event]) -> tuple[int, int, int, bool]:
    """(delivered, lost, duplicated, exact) of one reader against the session's whole stream."""
    ids = [e[0] for e in r.events]
    counts = Counter(ids)
    duplicated = sum(c - 1 for c in counts.values())
    lost = len({e[0] for e in full} - set(ids))
    exact = ids == list(range(1, len(ids) + 1)) and r.events == full
    return len(ids), lost, duplicated, exact


# ---- --hosts: one and two servers on one Postgres queue ---------------------------------------------------

def throwaway_postgres() -> Any:
    """The test suite's throwaway PostgreSQL server (tests/agent/pg_server.py), started."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("pg_server_bench", ROOT / "tests" / "agent" / "pg_server.py")
    module = importlib.util.module_from_spec(spec)  # type: ignore[arg-type]
    spec.loader.exec_module(module)  # type: ignore[union-attr]
    bin_dir = module.find_bin_dir()
    if bin_dir is None:
        raise SystemExit("--hosts needs PostgreSQL's initdb and pg_ctl (Debian's postgresql package), or --database")
    server = module.PgServer(bin_dir)
    server.start()
    return server


def one_round(servers: int, url: str, args: argparse.Namespace, tmp: Path, tag: str) -> dict[str, Any]:
    """``servers`` servers (``--workers`` each) on the database ``url`` and one data dir; ``--sessions``
    sessions created over them in turn, all at once; sessions/min from the first create to the last end."""
    root, data = tmp / f"roots-{tag}", tmp / f"data-{tag}"
    root.mkdir()
    flags: tuple[str, ...] = ("--database", url, "--lease", str(args.lease))
    if args.ray_address:  # every server hands its migrations to the one cluster
        flags += ("--executor", "ray", "--ray-address", args.ray_address)
    up = [Server(data, root, args.workers, max(args.sessions, 1), flags, log_name=f"serve-{tag}-{n}.log")
          for n in range(servers)]
    stats = Stats()
    try:
        async def create_all() -> list[tuple[str, str] | None]:
            clients = [httpx.AsyncClient(base_url=s.url, headers=HEADERS, timeout=120) for s in up]
            try:
                return await asyncio.gather(*(create(clients[n % servers], root, n, stats)
                                              for n in range(args.sessions)))
            finally:
                for c in clients:
                    await c.aclose()

        t0 = time.perf_counter()
        sessions = [m for m in asyncio.run(create_all()) if m is not None]
        with httpx.Client(base_url=up[0].url, headers=HEADERS, timeout=60) as c:
            pending = {sid for sid, _ in sessions}
            deadline = time.monotonic() + args.stream_timeout
            while pending and time.monotonic() < deadline:
                pending = {sid for sid in pending if c.get(f"/v1/sessions/{sid}").json()["state"]
                           not in {"finished", "failed", "cancelled", "waiting_for_approval"}}
                time.sleep(0.5)
            wall = time.perf_counter() - t0
            starts: Counter[str] = Counter()
            per_host: Counter[str] = Counter()
            statuses: Counter[str] = Counter()
            for sid, _ in sessions:
                lines = c.get(f"/v1/sessions/{sid}/events", params={"after": 0}).text.splitlines()
                started = [json.loads(line[6:]) for before, line in itertools.pairwise(lines)
                           if before == "event: started" and line.startswith("data: ")]
                starts[sid] = len(started)
                per_host.update(s.get("host", "?") for s in started)
                statuses[str(c.get(f"/v1/sessions/{sid}").json()["status"])] += 1
    finally:
        for s in up:
            s.kill()
    return {"servers": servers, "sessions": len(sessions), "wall": wall, "per_min": len(sessions) / wall * 60,
            "twice": sum(1 for n in starts.values() if n != 1), "hosts": len(per_host), "statuses": statuses,
            "errors": stats.errors, "unfinished": len(pending)}


def hosts_main(args: argparse.Namespace) -> int:
    """Sessions/minute of one server and of two on one Postgres queue, measured in one run (rounds
    alternate 1, 2, 1, 2...: the machine's load falls on both)."""
    tmp = Path(tempfile.mkdtemp(prefix="ferry-bench-hosts-"))
    pg = None if args.database else throwaway_postgres()
    results: list[dict[str, Any]] = []
    cluster = None
    args.ray_address = args.ray
    try:
        if args.ray == "local":  # one local cluster for both servers (each would start its own with 'local')
            import ray

            cluster = ray
            ray.init(num_cpus=os.cpu_count() or 1, include_dashboard=False, log_to_driver=False)
            args.ray_address = ray.get_runtime_context().gcs_address
        where = f"Ray tasks on {args.ray_address}" if args.ray_address else "the servers' worker threads"
        print(f"--hosts: {args.sessions} sessions per round, --workers {args.workers} per server, {args.rounds} "
              f"round(s) of 1 then 2 servers, migrations in {where}; load average {os.getloadavg()[0]:.2f} on "
              f"{os.cpu_count()} cores", flush=True)
        for r in range(args.rounds):
            for servers in (1, 2):
                tag = f"{servers}s-r{r}"
                url = args.database or pg.create_database(f"bench_{tag.replace('-', '_')}")
                res = one_round(servers, url, args, tmp, tag)
                results.append(res)
                print(f"round {r} {servers} server(s): {res['sessions']} sessions in {res['wall']:.1f} s = "
                      f"{res['per_min']:.2f} sessions/min; run by {res['hosts']} host(s); run twice {res['twice']}; "
                      f"{dict(res['statuses'])}; errors {len(res['errors'])}; load {os.getloadavg()[0]:.2f}",
                      flush=True)
    finally:
        if cluster is not None:
            cluster.shutdown()
        if pg is not None:
            pg.stop()
        shutil.rmtree(tmp, ignore_errors=True)
    one = [r["per_min"] for r in results if r["servers"] == 1]
    two = [r["per_min"] for r in results if r["servers"] == 2]
    mean_one, mean_two = sum(one) / len(one), sum(two) / len(two)
    print(f"\nsessions/min  1 server {mean_one:.2f}   2 servers {mean_two:.2f}   ratio {mean_two / mean_one:.2f}x "
          f"(both servers on this machine's {os.cpu_count()} cores, --workers {args.workers} each: on two machines "
          "each would bring its own cores)")
    ok = all(r["twice"] == 0 and not r["errors"] and not r["unfinished"] for r in results)
    print(f"target no session run twice, no errors, every session ended   {'met' if ok else 'NOT met'}")
    return 0 if ok else 1


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sessions", type=int, default=16)
    ap.add_argument("--readers", type=int, default=200)
    ap.add_argument("--workers", type=int, default=os.cpu_count() or 1, help="server workers (default: the cores)")
    ap.add_argument("--idle-s", type=float, default=5.0, help="seconds of idle latency sampling")
    ap.add_argument("--stream-timeout", type=float, default=1800.0, help="longest silence on a stream (s)")
    ap.add_argument("--quick", action="store_true", help="4 sessions, 40 readers")
    ap.add_argument("--hosts", action="store_true", help="sessions/min of 1 and 2 servers on one Postgres queue "
                                                         "(default 8 sessions, 1 worker per server)")
    ap.add_argument("--database", default=None, help="--hosts: this postgresql:// server's database (it must be "
                                                     "empty) instead of a throwaway one")
    ap.add_argument("--rounds", type=int, default=1, help="--hosts: rounds of 1 then 2 servers")
    ap.add_argument("--lease", type=float, default=30.0, help="--hosts: the servers' --lease")
    ap.add_argument("--ray", metavar="ADDRESS|local", default=None,
                    help="--hosts: the servers run migrations as Ray tasks on this cluster ('local': one started "
                         "here for both)")
    args = ap.parse_args()
    if args.hosts:
        if "--sessions" not in sys.argv:
            args.sessions = 8
        if "--workers" not in sys.argv:
            args.workers = 1
        return hosts_main(args)
    if args.quick:
        args.sessions, args.readers = 4, 40
    tmp = Path(tempfile.mkdtemp(prefix="ferry-bench-service-"))
    root = tmp / "roots"
    root.mkdir()
    stats = Stats()
    print(f"server: --workers {args.workers} --queue {max(args.sessions, 1)}; {args.sessions} sessions, "
          f"{args.readers} readers; load average {os.getloadavg()[0]:.2f} on {os.cpu_count()} cores", flush=True)
    server = Server(tmp / "data", root, args.workers, max(args.sessions, 1))
    try:
        warm = warm_up(server.url, root)
        idle_poll = Poller(server.url, Stats())
        idle_poll.ids.append(warm)
        idle = idle_poll.measure(args.idle_s)
        poller = Poller(server.url, stats)
        sessions, readers, full, wall = asyncio.run(load(server.url, root, args, stats, poller))
        poller.halt.set()
        if poller.is_alive():
            poller.join()
        loaded = poller.samples
        with httpx.Client(base_url=server.url, headers=HEADERS, timeout=60) as c:
            views = {sid: c.get(f"/v1/sessions/{sid}").json() for sid, _ in sessions}
    finally:
        server.kill()
    log_tail = server.log_path.read_text()[-2000:]
    shutil.rmtree(tmp, ignore_errors=True)

    print(f"\n{'case':22} {'source':10} {'state':9} {'status':12} {'events':>6}")
    for sid, case in sessions:
        v, events = views[sid], len(full.get(sid, []))
        print(f"{case:22} {v['source']['kind']:10} {v['state']:9} {v['status']!s:12} {events:6}")
    statuses = Counter(str(views[sid]["status"]) for sid, _ in sessions)
    delivered = lost = duplicated = inexact = 0
    for r in readers:
        d, lo, du, exact = check_reader(r, full.get(r.sid, []))
        delivered, lost, duplicated, inexact = delivered + d, lost + lo, duplicated + du, inexact + (not exact)
    ratio_50 = pct(loaded, 0.5) / pct(idle, 0.5) if idle and loaded else float("nan")
    ratio_99 = pct(loaded, 0.99) / pct(idle, 0.99) if idle and loaded else float("nan")
    print(f"\nsessions finished      {sum(views[s]['state'] == 'finished' for s, _ in sessions)}/{args.sessions} "
          f"({', '.join(f'{k} {v}' for k, v in statuses.items())})")
    print(f"wall time              {wall:.1f} s (creation to the last stream's end)")
    print(f"throughput             {len(sessions) / wall * 60 if wall else 0:.2f} sessions/min "
          f"with {args.workers} workers")
    print(f"API latency idle       p50 {pct(idle, 0.5):.1f} ms  p99 {pct(idle, 0.99):.1f} ms  ({len(idle)} requests)")
    print(f"API latency loaded     p50 {pct(loaded, 0.5):.1f} ms  p99 {pct(loaded, 0.99):.1f} ms  "
          f"({len(loaded)} requests)")
    print(f"loaded / idle          p50 {ratio_50:.1f}x  p99 {ratio_99:.1f}x")
    print(f"events delivered       {delivered} to {len(readers)} readers ({sum(map(len, full.values()))} in all "
          f"sessions); lost {lost}, duplicated {duplicated}, readers not equal to ?after=0: {inexact}")
    print(f"reconnects             {stats.reconnects}")
    print(f"errors                 {len(stats.errors)}")
    for e in stats.errors[:20]:
        print(f"  {e}")
    targets = [
        ("16 concurrent sessions", args.sessions >= 16 and len(sessions) == args.sessions),
        ("200 stream readers", args.readers >= 200 and len(readers) == args.readers),
        ("zero errors", not stats.errors),
        ("zero lost or duplicated events, every reader equal to ?after=0",
         not lost and not duplicated and not inexact),
        ("every session migrated", statuses == Counter({"migrated": len(sessions)}) and bool(sessions)),
    ]
    print()
    for name, ok in targets:
        print(f"target {name:62} {'met' if ok else 'NOT met'}")
    if stats.errors or lost or duplicated:
        print(f"\nserver log (tail):\n{log_tail}")
    return 0 if all(ok for _, ok in targets) else 1


if __name__ == "__main__":
    sys.exit(main())
