"""Per-run memory and disk defaults follow the host (``sandbox.hostmem``), from a given meminfo and cgroup
(``ferry serve`` and ``ferry doctor``: tests/agent/test_host_defaults_cli.py)."""

from __future__ import annotations

from pathlib import Path

from sandbox import hostmem
from sandbox.hostmem import GiB, MiB


def meminfo(total_gib: float, available_gib: float | None = None) -> str:
    kb = lambda g: int(g * 1024 * 1024)  # noqa: E731
    avail = total_gib if available_gib is None else available_gib
    return f"MemTotal:       {kb(total_gib)} kB\nMemFree:   1 kB\nMemAvailable:   {kb(avail)} kB\nHugePages_Total: 0\n"


def test_parse_meminfo_reads_kilobytes_as_bytes():
    info = hostmem.parse_meminfo(meminfo(23.5, 20))
    assert info["MemTotal"] == int(23.5 * 1024 * 1024) * 1024
    assert info["MemAvailable"] == 20 * GiB
    assert info["HugePages_Total"] == 0


def test_a_big_host_keeps_the_old_caps():
    b = hostmem.budget(2, meminfo=hostmem.parse_meminfo(meminfo(256)))
    assert (b.run_memory_bytes, b.disk_bytes) == (16 * GiB, 4 * GiB)


def test_a_small_host_shares_its_memory_between_the_runs_in_flight():
    info = hostmem.parse_meminfo(meminfo(23.5))
    one, eight = hostmem.budget(2, meminfo=info), hostmem.budget(16, meminfo=info)
    # memory + tmpfs of every run in flight fit in what is usable, headroom left to the host
    for b in (one, eight):
        assert b.runs_in_flight * (b.run_memory_bytes + b.disk_bytes) <= b.usable_bytes < b.total_bytes - GiB
    assert one.run_memory_bytes < 16 * GiB and one.disk_bytes < 4 * GiB
    assert eight.run_memory_bytes < one.run_memory_bytes


def test_ferrys_own_cgroup_limit_wins_over_the_host(tmp_path: Path):
    cg = tmp_path / "cgroup"
    (cg / "memory" / "box" / "inner").mkdir(parents=True)
    (cg / "memory" / "box" / "memory.limit_in_bytes").write_text(str(6 * GiB))
    (cg / "memory" / "box" / "inner" / "memory.limit_in_bytes").write_text("9223372036854771712")
    procs = tmp_path / "self_cgroup"
    procs.write_text("4:memory:/box/inner\n3:pids:/\n0::/\n")
    assert hostmem.cgroup_memory_limit(procs, cg) == 6 * GiB
    (cg / "unified").mkdir()
    procs.write_text("0::/unified\n")
    (cg / "unified" / "memory.max").write_text(f"{3 * GiB}\n")
    assert hostmem.cgroup_memory_limit(procs, cg) == 3 * GiB
    b = hostmem.budget(2, meminfo=hostmem.parse_meminfo(meminfo(512)), cgroup_bytes=6 * GiB)
    assert 2 * (b.run_memory_bytes + b.disk_bytes) <= 6 * GiB


def test_a_tiny_host_does_not_fit_and_says_how_many_runs_do():
    b = hostmem.budget(8, meminfo=hostmem.parse_meminfo(meminfo(4)))
    assert not b.fits() and b.max_runs() == (3 * GiB) // (hostmem.MIN_RUN_MEMORY + hostmem.MIN_RUN_DISK)
    assert b.run_memory_bytes >= hostmem.MIN_RUN_MEMORY and b.disk_bytes >= 256 * MiB


def test_runs_in_flight_counts_what_the_scheduler_can_start(monkeypatch) -> None:
    """A migration's tpx run, its reference, and the tests and CPU check beside them on spare cores: the
    budget divides memory by all of them (second reader: a 4-core host ran 3 runs on a 2-run budget)."""
    assert hostmem.runs_in_flight(1, parallel=1) == 1  # side-by-side runs off: the foreground only
    assert hostmem.runs_in_flight(1, parallel=2) == 2  # tpx run + reference
    assert hostmem.runs_in_flight(1, parallel=4) == 4  # + tests + CPU check (3 background on 4 cores)
    assert hostmem.runs_in_flight(3, parallel=4) == 6  # 3 foreground + 3 references (spare cores: none)
    monkeypatch.setenv("FERRY_PARALLEL_RUNS", "3")
    assert hostmem.parallel_runs() == 3 and hostmem.runs_in_flight(1) == 3
    monkeypatch.setenv("FERRY_PARALLEL_RUNS", "lots")
    assert hostmem.parallel_runs() >= 1  # the core count, with a warning


def test_three_runs_on_a_small_host_share_its_memory() -> None:
    info = hostmem.parse_meminfo("MemTotal: 24117248 kB\nMemAvailable: 24117248 kB\n")  # 23 GiB
    host = hostmem.budget(hostmem.runs_in_flight(1, parallel=4), meminfo=info)
    assert host.runs_in_flight == 4
    assert 4 * (host.run_memory_bytes + host.disk_bytes) <= host.usable_bytes
