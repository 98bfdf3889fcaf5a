"""Teardown hangs (``sandbox.teardown``): a run whose work is done but whose process does not exit
ends within seconds as ``teardown_hang`` with each stuck process's Python stack, not at its
timeout; a rank that is still busy after its peer exited is never taken for a hung one."""

from __future__ import annotations

import textwrap
import time
from pathlib import Path

import pytest

from tools.runner.api import run
from tools.runner.models import RunLimits, RunRequest

TIMEOUT_S = 120  # the runs below must end long before it

# rank 1 finishes like rank 0, then lingers in an atexit handler: torchrun waits for it forever
LINGER_ATEXIT = textwrap.dedent("""
    import atexit, time, torch, torch.distributed as dist
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    total = torch.ones(2)
    dist.all_reduce(total)
    print(f"rank {rank} done {total.tolist()}", flush=True)
    dist.destroy_process_group()

    def linger_after_training():
        time.sleep(600)

    if rank == 1:
        atexit.register(linger_after_training)
""")

# one process whose main code returns while a non-daemon thread it started never ends; it also
# swaps its own stack file for a link to a host file (the runner must not follow it)
THREAD_LEFT_RUNNING = textwrap.dedent("""
    import glob, os, threading, time

    def heartbeat_forever():
        while True:
            time.sleep(0.5)

    mine = glob.glob(os.path.join(os.environ.get("FERRY_STACKS_DIR", "/nonexistent"), f"stack-{os.getpid()}-*.txt"))
    if "--plant-link" in os.sys.argv and mine:
        os.remove(mine[0])
        os.symlink("/etc/passwd", mine[0])
    threading.Thread(target=heartbeat_forever, name="heartbeat").start()
    print("main done", flush=True)
""")

# rank 1 leaves early; rank 0 keeps computing (silently) for a while, then both are done
BUSY_AFTER_PEER = textwrap.dedent("""
    import time, torch, torch.distributed as dist
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    dist.barrier()
    dist.destroy_process_group()
    if rank == 0:
        end = time.monotonic() + 9
        x = torch.randn(128, 128)
        while time.monotonic() < end:
            x = torch.tanh(x @ x)
    print(f"rank {rank} finished", flush=True)
""")


@pytest.fixture(scope="module")
def repo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    src = tmp_path_factory.mktemp("hang") / "repo"
    src.mkdir()
    (src / "linger.py").write_text(LINGER_ATEXIT)
    (src / "thread_left.py").write_text(THREAD_LEFT_RUNNING)
    (src / "busy.py").write_text(BUSY_AFTER_PEER)
    return src


def _run(repo: Path, cmd: str, tmp_path: Path, timeout_s: float = TIMEOUT_S, **kw):
    t0 = time.monotonic()
    res = run(RunRequest(path=repo, command=cmd, device="cpu", artifacts_dir=tmp_path / "art", timeout_s=timeout_s,
                         **kw))
    return res, time.monotonic() - t0


def test_a_rank_lingering_at_exit_ends_the_run_as_teardown_hang_with_its_stack(repo: Path, tmp_path: Path):
    res, took = _run(repo, "torchrun --standalone --nproc-per-node 2 linger.py", tmp_path)
    assert "rank 0 done [2.0, 2.0]" in res.stdout_tail and "rank 1 done [2.0, 2.0]" in res.stdout_tail
    assert res.status == "killed" and res.limit_hit == "teardown_hang", (res.status, res.stderr_tail[-2000:])
    assert took < TIMEOUT_S / 2
    trace = res.trace
    assert trace is not None and trace.signature.kind == "teardown_hang"
    assert trace.rank == 1 and trace.exc_type == "TeardownHang"
    stuck = {s.role: s for s in trace.stacks}
    assert "rank1" in stuck and "rank0" not in stuck  # rank 0 exited; torchrun's agent waits for rank 1
    assert stuck["rank1"].shutting_down
    frames = stuck["rank1"].threads[0]
    assert (frames[-1].file, frames[-1].function, frames[-1].user) == ("linger.py", "linger_after_training", True)
    assert trace.location == "linger.py:11"
    assert "rank 1" in trace.message and "in interpreter shutdown" in trace.message
    if "agent" in stuck:  # the launcher was still waiting for its worker
        assert any(f.function == "_invoke_run" for t in stuck["agent"].threads for f in t)


def test_a_thread_left_running_after_main_is_a_teardown_hang(repo: Path, tmp_path: Path):
    res, took = _run(repo, "python thread_left.py", tmp_path)
    assert res.stdout_tail.strip() == "main done"
    assert res.limit_hit == "teardown_hang" and took < TIMEOUT_S / 2, (res.status, res.stderr_tail)
    assert res.trace is not None
    (proc,) = res.trace.stacks
    assert proc.role == "proc" and proc.shutting_down
    functions = {f.function for t in proc.threads for f in t}
    assert "heartbeat_forever" in functions  # the thread that kept it alive
    assert any(f.function == "_shutdown" for t in proc.threads for f in t)  # the main thread joining it


def test_a_planted_link_for_a_stack_file_is_not_followed(repo: Path, tmp_path: Path):
    res, _ = _run(repo, "python thread_left.py --plant-link", tmp_path)
    assert res.limit_hit == "teardown_hang" and res.trace is not None
    (proc,) = res.trace.stacks
    assert proc.threads == [] and proc.text == ""
    assert "root:" not in res.model_dump_json()
    assert any(r.path.startswith("stacks/") and "link" in r.reason for r in res.artifacts_refused)
    assert "wrote no stack" in res.trace.message


def test_a_rank_busy_after_its_peer_exited_is_not_a_hang(repo: Path, tmp_path: Path):
    res, _ = _run(repo, "torchrun --standalone --nproc-per-node 2 busy.py", tmp_path)
    assert res.status == "ok", (res.status, res.limit_hit, res.trace and res.trace.message)
    assert "rank 0 finished" in res.stdout_tail and "rank 1 finished" in res.stdout_tail


def test_teardown_grace_zero_turns_the_watch_off(repo: Path, tmp_path: Path):
    res, _ = _run(repo, "python thread_left.py", tmp_path, timeout_s=12, limits=RunLimits(teardown_grace_s=0))
    assert res.status == "timeout" and res.limit_hit == "timeout"  # only the run's own timeout ends it
