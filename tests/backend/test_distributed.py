"""torch.distributed on tpx: the registered tpxgloo backend (which initialisations pick it,
collectives in place on tpx memory, DDP == one process on the whole batch)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest
import torch
import torch.distributed as dist
from torch import nn

import backend  # noqa: F401  (registers tpx and tpxgloo)
from backend.bridge import to_cpu
from backend.distributed import TpxGlooProcessGroup


def _load_worker():
    spec = importlib.util.spec_from_file_location("_tpx_dist_worker", Path(__file__).with_name("_dist_worker.py"))
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


run_workers = _load_worker().run_workers


@pytest.mark.parametrize("mode,init", [("none", "tcp"), ("cpu:gloo,tpx:tpxgloo", "file"), ("device_id", "tcp")])
def test_two_process_collectives_and_ddp_match_one_process(tmp_path, mode, init):
    results = run_workers(tmp_path, "collectives", mode, init)
    for rank, res in enumerate(results):
        assert res["group"] == "TpxGlooProcessGroup"
        assert res["backend"] == {"none": "undefined", "device_id": "tpxgloo"}.get(mode, mode)
        assert res["all_reduce"] == [3.0] * 4 and res["in_place"]
        assert res["avg_max"] == [[1.5, 1.5], [2.0, 2.0], f"tpx:{rank}"]
        assert res["broadcast"] == [10.0] * 3
        assert res["all_gather"] == [[0.0, 0.0], [1.0, 1.0]]
        assert res["all_gather_into_tensor"] == [0.0, 0.0, 1.0, 1.0]
        # sum over ranks of arange(4) + rank = [1, 3, 5, 7]; rank r keeps chunk r
        assert res["reduce_scatter_tensor"] == [[1.0, 3.0], [5.0, 7.0]][rank]
        assert res["all_to_all_single"] == [[0.0, 1.0, 10.0, 11.0], [2.0, 3.0, 12.0, 13.0]][rank]
        assert res["all_to_all"] == [[0.0, 10.0], [1.0, 11.0]][rank]
        assert res["send_recv"] == [[14.0] * 3, [7.0] * 3][rank]
        assert res["batch_isend_irecv"] == [float(1 - rank)] * 2
        assert res["cpu_all_reduce"] == [2.0, 2.0]
        assert res["all_gather_object"] == [{"rank": 0}, {"rank": 1}]
        ddp = res["ddp"]
        assert ddp["devices"] == [f"tpx:{rank}"] and ddp["changed"] > 1e-3
        assert ddp["max_diff"] < 1e-6  # same parameters as one process on the concatenated batch


def test_registered_for_tpx_without_patching_pytorch():
    assert dist.get_default_backend_for_device("tpx") == "tpxgloo"
    assert dist.get_default_backend_for_device(torch.device("tpx", 1)) == "tpxgloo"
    assert dist.Backend.default_device_backend_map["cpu"] == "gloo"
    assert dist.Backend.backend_capability["tpxgloo"] == ["tpx"]
    assert dist.Backend.backend_capability["gloo"] == ["cpu", "cuda"]
    from torch.distributed import distributed_c10d as c10d

    assert c10d.BackendConfig("gloo").get_device_backend_map() == {"cpu": "gloo", "cuda": "gloo"}
    assert not hasattr(c10d.BackendConfig.__init__, "_tpx_patched")


@pytest.fixture
def single_group(tmp_path):
    def init(backend_name, **kw):
        kwargs = {} if backend_name is None else {"backend": backend_name}
        dist.init_process_group(init_method=f"file://{tmp_path / 'rdzv'}", rank=0, world_size=1, **kwargs, **kw)
        return dist.group.WORLD

    yield init
    if dist.is_initialized():
        dist.destroy_process_group()


@pytest.mark.parametrize("backend_name", [None, "cpu:gloo,tpx:tpxgloo", "tpxgloo", "default_for_device"])
def test_single_process_collectives_write_tpx_memory(single_group, backend_name):
    if backend_name == "default_for_device":  # what the migration codemods write
        backend_name = dist.get_default_backend_for_device(torch.device("tpx", 0))
    assert isinstance(single_group(backend_name), TpxGlooProcessGroup)
    x = torch.arange(4.0, device="tpx")
    view = to_cpu(x)
    dist.all_reduce(x, op=dist.ReduceOp.MAX)
    work = dist.all_reduce(x, async_op=True)
    work.wait()
    assert work.is_completed() and work.get_future().value()[0].device.type == "tpx"
    view.add_(1)  # the CPU view still aliases the tpx memory the collective wrote
    assert x.cpu().tolist() == [1.0, 2.0, 3.0, 4.0]
    outs = [torch.zeros(4, device="tpx")]
    dist.all_gather(outs, x)
    assert outs[0].cpu().tolist() == [1.0, 2.0, 3.0, 4.0]
    c = torch.ones(2)  # CPU tensors share the group
    dist.all_reduce(c)
    assert c.tolist() == [1.0, 1.0]
    dist.barrier()


def test_coalesced_collectives(single_group):
    from torch.distributed import distributed_c10d as c10d

    single_group(None)
    ins = [torch.arange(3.0, device="tpx"), torch.ones(2, device="tpx")]
    outs = [torch.zeros(3, device="tpx"), torch.zeros(2, device="tpx")]
    with c10d._coalescing_manager(async_ops=True) as cm:
        for o, i in zip(outs, ins, strict=True):
            dist.all_gather_into_tensor(o, i)
    cm.wait()
    assert [o.cpu().tolist() for o in outs] == [[0.0, 1.0, 2.0], [1.0, 1.0]]
    rs = [torch.zeros(3, device="tpx"), torch.zeros(2, device="tpx")]
    with c10d._coalescing_manager(async_ops=True) as cm:
        for o, i in zip(rs, ins, strict=True):
            dist.reduce_scatter_tensor(o, i * 2)
    cm.wait()
    assert [o.cpu().tolist() for o in rs] == [[0.0, 2.0, 4.0], [2.0, 2.0]]


def test_plain_gloo_is_stock_gloo_and_refuses_tpx_tensors(single_group):
    group = single_group("gloo")
    assert not isinstance(group, TpxGlooProcessGroup)
    c = torch.ones(2)
    dist.all_reduce(c)  # CPU tensors: gloo as ever
    assert c.tolist() == [1.0, 1.0]
    with pytest.raises(RuntimeError, match="No backend type associated with device type tpx"):
        dist.all_reduce(torch.ones(2, device="tpx"))


def test_single_process_ddp_matches_cpu(single_group, tpx_config):
    from torch.nn.parallel import DistributedDataParallel as DDP

    tpx_config(matmul_precision="highest")
    single_group(None, device_id=torch.device("tpx", 0))
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 3))
    ref = nn.Sequential(*[m for m in __import__("copy").deepcopy(model)])
    ddp = DDP(model.to("tpx"))
    opt = torch.optim.Adam(ddp.parameters(), lr=0.01)
    ref_opt = torch.optim.Adam(ref.parameters(), lr=0.01)
    g = torch.Generator().manual_seed(1)
    for _ in range(3):
        x, y = torch.randn(5, 8, generator=g), torch.randn(5, 3, generator=g)
        for m, o, dev in ((ddp, opt, "tpx"), (ref, ref_opt, "cpu")):
            loss = nn.functional.mse_loss(m(x.to(dev)), y.to(dev))
            o.zero_grad()
            loss.backward()
            o.step()
    for p, q in zip(ddp.module.parameters(), ref.parameters(), strict=True):
        assert p.device.type == "tpx"
        assert torch.equal(p.detach().cpu(), q.detach())



def test_a_collective_completes_while_the_caller_holds_the_gil(tmp_path):
    """pytorch/examples' ddp-tutorial-series hung at its end on tpx under load: freeing the DDP model
    freed its reducer, which joined gloo's worker thread with the GIL held, while that thread waited
    for the GIL to run (or free) a Python callback chained on gloo's future."""
    results = run_workers(tmp_path, "gil", "none", timeout=90)
    assert results == [{"completed": True, "value": [3.0] * 3}] * 2


def test_freeing_ddp_after_destroy_while_gloo_finishes_a_collective_does_not_hang(tmp_path):
    """The same script's end, the other way it hung: gloo's worker thread freeing a finished
    collective's tensors (their Python objects) while the reducer's destructor freed gloo under the
    GIL. The model is freed at once on both ranks; each process exits."""
    results = run_workers(tmp_path, "reducer_frees_the_group", "none", timeout=45)
    assert results == [{"freed_in_s": 0}, {"freed_in_s": 0}]
