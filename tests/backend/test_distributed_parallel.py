"""FSDP2, DTensor and tensor/sequence parallel on tpx in 2 processes (``init_device_mesh("tpx")``),
each matched against the same model trained in one process."""

from __future__ import annotations

import importlib.util
from pathlib import Path

_spec = importlib.util.spec_from_file_location("_tpx_dist_worker", Path(__file__).with_name("_dist_worker.py"))
assert _spec is not None and _spec.loader is not None
_worker = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_worker)
run_workers = _worker.run_workers


def test_fsdp2_fully_shard_matches_one_process(tmp_path):
    for rank, res in enumerate(run_workers(tmp_path, "fsdp", "env")):
        assert res["group"] == "TpxGlooProcessGroup" and res["mesh"] == "tpx"
        # every parameter is split in two along dim 0 (Linear(8, 16), Linear(16, 4))
        assert res["sharded"] == [[8, 8], [8], [2, 16], [2]]
        assert res["fsdp"]["devices"] == [f"tpx:{rank}"] and res["fsdp"]["changed"] > 1e-3
        assert res["fsdp"]["max_diff"] < 1e-6


def test_dtensor_and_tensor_sequence_parallel_match_one_process(tmp_path):
    for rank, res in enumerate(run_workers(tmp_path, "tp", "env")):
        assert res["dtensor_local"] == [[2, 6], f"tpx:{rank}"]
        assert res["dtensor_full"] and res["dtensor_replicate"] and res["dtensor_matmul"]
        # colwise: weight [16, 8] -> [8, 8], bias [8]; rowwise: weight [4, 16] -> [4, 8], bias replicated
        assert res["tp_local"] == [[8, 8], [8], [4, 8], [4]]
        assert res["tp"]["devices"] == [f"tpx:{rank}"] and res["tp"]["changed"] > 1e-3
        assert res["tp"]["max_diff"] < 1e-5
        assert res["sp"]["max_diff"] < 1e-5
