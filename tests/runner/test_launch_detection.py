"""Processes per node from a run command (torchrun flags, mp.spawn nprocs) and the device counts
the runner sets for them; the first failing rank in torchrun's output."""

from __future__ import annotations

from pathlib import Path

import pytest

from tools.runner.launch import device_env, launcher_procs, procs_per_node
from tools.trace import parse_trace
from tools.trace.ranks import root_cause, split_ranks


@pytest.mark.parametrize(("command", "expected"), [
    ("torchrun --standalone --nproc_per_node=2 train.py --epochs 2", 2),
    ("torchrun --standalone --nproc-per-node 4 train.py", 4),
    ("python -m torch.distributed.run --nproc-per-node=3 train.py", 3),
    ("cd src && PYTHONPATH=. torchrun --nnodes 1 --nproc_per_node 2 -m pkg.train", 2),
    ("/venv/bin/torchrun train.py", 1),  # torchrun's default
    ("torchrun --nproc-per-node gpu train.py", None),  # not a number: not guessed
    ("python train.py --nproc_per_node 2", None),  # not a launcher's flag
    ("python -m torch.distributed.launch --nproc_per_node=2 train.py", 2),
])
def test_launcher_procs(command: str, expected: int | None):
    assert launcher_procs(command) == expected


def test_spawn_nprocs_from_the_entry_script(tmp_path: Path):
    (tmp_path / "main.py").write_text("import torch.multiprocessing as mp\n"
                                      "mp.spawn(train,\n         args=(cfg, len(x)),\n         nprocs=3, join=True)\n")
    (tmp_path / "other.py").write_text("mp.spawn(train, nprocs=world_size)\n")
    (tmp_path / "named.py").write_text("WORLD_SIZE = 2  # processes\nmp.spawn(train, args=(WORLD_SIZE,), "
                                       "nprocs=WORLD_SIZE)\n")
    (tmp_path / "twice.py").write_text("n = 2\nif x:\n    n = 4\nmp.spawn(train, nprocs=n)\n")
    assert procs_per_node("python main.py --steps 2", tmp_path) == 3
    assert procs_per_node("python other.py", tmp_path) is None
    assert procs_per_node("python named.py", tmp_path) == 2
    assert procs_per_node("python twice.py", tmp_path) is None  # not one literal: not guessed
    assert procs_per_node("python ../main.py", tmp_path) is None


def test_device_env():
    cmd = "torchrun --nproc_per_node=3 train.py"
    assert device_env(cmd, None, device="tpx", redirect_cuda=None, env={}) == {"TPX_DEVICE_COUNT": "3"}
    assert device_env(cmd, None, device="tpx", redirect_cuda=None, env={"TPX_DEVICE_COUNT": "8"}) == {
        "TPX_DEVICE_COUNT": "8"}  # at least N: a larger count the caller asked for stays
    assert device_env(cmd, None, device="cpu", redirect_cuda="cpu", env={}) == {"FERRY_REDIRECT_DEVICE_COUNT": "3"}
    assert device_env(cmd, None, device="cpu", redirect_cuda=None, env={}) == {}
    # one process: one device on both sides, so that device_count() > 1 branches agree
    assert device_env("python train.py", None, device="tpx", redirect_cuda="tpx", env={}) == {
        "TPX_DEVICE_COUNT": "1", "FERRY_REDIRECT_DEVICE_COUNT": "1"}
    assert device_env("python train.py", None, device="tpx", redirect_cuda=None, env={}) == {"TPX_DEVICE_COUNT": "1"}


TORCHRUN_FAILURE = """\
[rank0]: Traceback (most recent call last):
[rank1]: Traceback (most recent call last):
[rank1]:   File "/ws/repo/train.py", line 5, in <module>
[rank0]:   File "/ws/repo/train.py", line 7, in <module>
[rank1]:     raise ValueError("rank one broke")
[rank0]:     dist.barrier()
[rank1]: ValueError: rank one broke
[rank0]: RuntimeError: Connection closed by peer [127.0.0.1]:63143
E1201 21:12:07.576000 7252 torch/distributed/elastic/multiprocessing/api.py:1002] failed (exitcode: 1) local_rank: 1
Traceback (most recent call last):
  File "/venv/lib/python3.11/site-packages/torch/distributed/launcher/api.py", line 383, in launch_agent
    raise ChildFailedError(
torch.distributed.elastic.multiprocessing.errors.ChildFailedError: \n\
============================================================
train.py FAILED
------------------------------------------------------------
Failures:
[1]:
  time      : 2026-12-01_21:12:07
  host      : localhost
  rank      : 0 (local_rank: 0)
  exitcode  : -15 (pid: 7317)  (SIGTERM)
  error_file: <N/A>
  traceback : Signal 15 (SIGTERM) received by PID 7317
------------------------------------------------------------
Root Cause (first observed failure):
[0]:
  time      : 2026-12-01_21:12:07
  host      : localhost
  rank      : 1 (local_rank: 1)
  exitcode  : 1 (pid: 7318)
  error_file: /tmp/torchelastic_x/none_y/attempt_0/1/error.json
  traceback : Traceback (most recent call last):
    File "/ws/repo/train.py", line 5, in <module>
  ValueError: rank one broke
============================================================
"""


def test_interleaved_ranks_are_split_and_the_root_cause_rank_wins():
    per_rank, launcher = split_ranks(TORCHRUN_FAILURE)
    assert sorted(per_rank) == [0, 1] and "ValueError: rank one broke" in per_rank[1]
    assert "ChildFailedError" in launcher
    cause = root_cause(launcher)
    assert cause is not None and (cause.rank, cause.local_rank, cause.exitcode) == (1, 1, 1)
    trace = parse_trace(TORCHRUN_FAILURE, repo_roots=["/ws/repo"])
    assert trace is not None
    assert (trace.rank, trace.exc_type, trace.location) == (1, "ValueError", "train.py:5")
    assert trace.failed_ranks == [0, 1] and trace.origin == "subprocess"
    assert trace.wrapped_by is not None and trace.wrapped_by.endswith("ChildFailedError")


RENDEZVOUS_FAILURE = """\
Traceback (most recent call last):
  File "/venv/lib/python3.11/site-packages/torch/distributed/elastic/rendezvous/c10d.py", line 156, in _create_tcp_store
    store = TCPStore(
torch.distributed.DistNetworkError: The client socket has timed out after 5000ms while trying to connect to (h, 29500).

The above exception was the direct cause of the following exception:

Traceback (most recent call last):
  File "/venv/lib/python3.11/site-packages/torch/distributed/elastic/rendezvous/c10d.py", line 180, in _create_tcp_store
    raise RendezvousConnectionError(
torch.distributed.elastic.rendezvous.api.RendezvousConnectionError: The connection to the C10d store has failed.
"""


def test_a_launcher_rendezvous_failure_is_signed_with_its_cause():
    trace = parse_trace(RENDEZVOUS_FAILURE)
    assert trace is not None and trace.signature.kind == "rendezvous" and trace.rank is None
    assert "cause: DistNetworkError: The client socket has timed out" in (trace.signature.detail or "")


def test_device_env_leaves_test_runs_alone():
    # a test run may start torchrun jobs of its own: tpx keeps its default device count
    assert device_env("python -m pytest -q tests", None, device="tpx", redirect_cuda=None, env={}) == {}
    assert device_env(".venv/bin/pytest tests", None, device="tpx", redirect_cuda=None, env={}) == {}
