"""Item 4 of issue 33: the common FSDP2 example (meta-device model, ``fully_shard``,
``to_empty(device="tpx")``, ``reset_parameters()``) runs on tpx as a real 2-rank torchrun job,
and a rerun with the same seed gives the same parameters."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest

_SCRIPT = Path(__file__).with_name("_fsdp_meta_init.py")
_ROOT = Path(__file__).resolve().parents[2]


def _torchrun(out: Path, seed: int, *extra: str, env_extra: dict[str, str] | None = None) -> list[dict]:
    env = {**os.environ, "TPX_DEVICE_COUNT": "2", "PYTHONPATH": str(_ROOT), "OMP_NUM_THREADS": "1",
           **(env_extra or {})}
    proc = subprocess.run(
        [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2",
         str(_SCRIPT), str(out), str(seed), *extra],
        capture_output=True, text=True, timeout=240, env=env, cwd=out.parent,
    )
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-4000:]
    return [json.loads(Path(f"{out}.{rank}").read_text()) for rank in range(2)]


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> tuple[list[dict], list[dict]]:
    d = tmp_path_factory.mktemp("fsdp")
    return _torchrun(d / "first", 0), _torchrun(d / "again", 0)


def test_meta_init_runs_sharded_on_tpx(runs):
    first, _ = runs
    assert [r["devices"] for r in first] == [["tpx:0"], ["tpx:1"]]
    full = first[0]["full"]
    assert first[1]["full"] == full  # every rank sees the same whole parameters
    for name, value in full.items():
        rows = first[0]["local"][name] + first[1]["local"][name]
        assert rows == value  # the shards (dim 0) are the two halves of it
        assert first[0]["local"][name] != first[1]["local"][name]  # each shard drew its own numbers
        fan_in = 16 if name.startswith("0.") else 32
        flat = [v for row in value for v in row] if isinstance(value[0], list) else value
        bound = 1 / math.sqrt(fan_in)  # Linear.reset_parameters: kaiming_uniform_(a=sqrt(5)), uniform bias
        assert max(abs(v) for v in flat) <= bound and len(set(flat)) > 0.95 * len(flat)  # drawn, not filled
    # the ranks agree on the loss, the training step and the RNG state afterwards
    assert first[0]["loss"] == first[1]["loss"] and first[0]["trained"] == first[1]["trained"]
    assert first[0]["trained"] != full
    assert first[0]["rng_state"] == first[1]["rng_state"]


def test_rerun_with_the_same_seed_gives_the_same_parameters(runs):
    first, again = runs
    for a, b in zip(first, again, strict=True):
        assert a["local"] == b["local"] and a["full"] == b["full"]
        assert a["loss"] == b["loss"] and a["trained"] == b["trained"] and a["rng_state"] == b["rng_state"]


def test_each_rank_lands_on_its_own_device_when_the_program_selects_none(tmp_path):
    # pytorch/examples' FSDP2 script never sets the current device: DeviceMesh selects LOCAL_RANK's for
    # a process whose device is not initialized yet, as on CUDA. tpx answered "initialized" from the
    # start, so rank 1 reduced its gradients on tpx:0 ("attempting to assign a gradient located on
    # device with index 0 to a tensor on device 1").
    first = _torchrun(tmp_path / "example", 0, "example")
    assert [r["devices"] for r in first] == [["tpx:0"], ["tpx:1"]]
    assert first[0]["loss"] == first[1]["loss"] and first[0]["trained"] == first[1]["trained"]
    assert first[0]["trained"] != first[0]["full"]


def test_host_rng_mode_draws_each_shard_as_the_cpu_run_does(runs, tmp_path):
    # TPX_RNG=host is parity's RNG-alignment side run: the sharded init on tpx then draws what the same
    # program draws on CPU with gloo (each rank its shard from its CPU stream, DTensor's offsets ignored),
    # while the default (counter-based) mode draws the halves of one whole tensor, as CUDA does
    cpu = _torchrun(tmp_path / "cpu", 0, "cpu")
    host = _torchrun(tmp_path / "host", 0, env_extra={"TPX_RNG": "host", "TPX_MATMUL_PRECISION": "highest"})
    device_mode, _ = runs
    for c, h, d in zip(cpu, host, device_mode, strict=True):
        assert h["local"] == c["local"]
        assert h["loss"] == c["loss"] and h["trained"] == c["trained"]
        assert d["local"] != c["local"]
    assert cpu[0]["local"] == cpu[1]["local"]  # on CPU each rank drew the same numbers for its shard
