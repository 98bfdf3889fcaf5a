"""torch.distributed on tpx: the tpxgloo backend (collectives in place on tpx memory, DDP == CPU)."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import pytest
import torch
import torch.distributed as dist
from torch import nn

import backend  # noqa: F401  (registers tpx and tpxgloo)
from backend.bridge import to_cpu
from backend.distributed import TpxGlooProcessGroup

# A worker for torch.multiprocessing.spawn: run as a script so that spawn can import it.
_WORKER = textwrap.dedent(
    '''
    import json, sys
    import torch, torch.distributed as dist
    import torch.multiprocessing as mp
    from torch import nn
    from torch.nn.parallel import DistributedDataParallel as DDP
    import backend

    def train(model, device, group, rank):
        ddp = DDP(model.to(device), process_group=group)
        opt = torch.optim.SGD(ddp.parameters(), lr=0.1, momentum=0.9)
        g = torch.Generator().manual_seed(100 + rank)
        for _ in range(3):
            x, y = torch.randn(6, 8, generator=g), torch.randn(6, 3, generator=g)
            loss = nn.functional.mse_loss(ddp(x.to(device)), y.to(device))
            opt.zero_grad(); loss.backward(); opt.step()
        return [p.detach().cpu() for p in ddp.module.parameters()]

    def worker(rank, world, init, backend_name, out):
        backend.configure(matmul_precision="highest")
        kwargs = {} if backend_name == "none" else {"backend": backend_name}
        dist.init_process_group(init_method=init, rank=rank, world_size=world, **kwargs)
        res = {"group": type(dist.group.WORLD).__name__}
        x = torch.full((4,), float(rank + 1), device="tpx")
        ptr = x.data_ptr()
        dist.all_reduce(x)
        res["all_reduce"] = x.cpu().tolist(); res["in_place"] = x.data_ptr() == ptr
        b = torch.full((3,), float(rank * 10), device="tpx")
        dist.broadcast(b, src=1)
        res["broadcast"] = b.cpu().tolist()
        outs = [torch.zeros(2, device="tpx") for _ in range(world)]
        dist.all_gather(outs, torch.full((2,), float(rank), device="tpx"))
        res["all_gather"] = [o.cpu().tolist() for o in outs]
        dist.barrier()
        torch.manual_seed(0)
        model = nn.Sequential(nn.Linear(8, 16), nn.Tanh(), nn.Linear(16, 3))
        init_params = [p.detach().clone() for p in model.parameters()]
        cpu_group = dist.new_group(backend="cpu:gloo")  # a plain ProcessGroupGloo, CPU only
        cpu_params = train(nn.Sequential(*[m for m in __import__("copy").deepcopy(model)]), "cpu", cpu_group, rank)
        tpx_params = train(model, "tpx", None, rank)
        res["max_diff"] = max((a - b).abs().max().item() for a, b in zip(cpu_params, tpx_params))
        res["changed"] = min((a - b).abs().max().item() for a, b in zip(cpu_params, init_params))
        gathered = [None] * world
        dist.all_gather_object(gathered, [p.tolist() for p in tpx_params])
        res["ranks_agree"] = all(g == gathered[0] for g in gathered)
        with open(f"{out}.{rank}", "w") as f:
            json.dump(res, f)
        dist.destroy_process_group()

    if __name__ == "__main__":
        init, backend_name, out = sys.argv[1:4]
        mp.spawn(worker, args=(2, init, backend_name, out), nprocs=2)
    '''
)


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.parametrize("init,backend_name", [("file", "gloo"), ("tcp", "none")])
def test_two_process_collectives_and_ddp_match_cpu(tmp_path, init, backend_name):
    script = tmp_path / "worker.py"
    script.write_text(_WORKER)
    url = f"file://{tmp_path / 'rdzv'}" if init == "file" else f"tcp://127.0.0.1:{_free_port()}"
    out = tmp_path / "result"
    proc = subprocess.run(
        [sys.executable, str(script), url, backend_name, str(out)],
        capture_output=True, text=True, timeout=240,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    for rank in range(2):
        res = json.loads((tmp_path / f"result.{rank}").read_text())
        assert res["group"] == "TpxGlooProcessGroup"
        assert res["all_reduce"] == [3.0] * 4 and res["in_place"]
        assert res["broadcast"] == [10.0] * 3
        assert res["all_gather"] == [[0.0, 0.0], [1.0, 1.0]]
        assert res["changed"] > 0
        assert res["max_diff"] == 0.0
        assert res["ranks_agree"]


@pytest.fixture
def single_group(tmp_path):
    def init(backend_name):
        kwargs = {} if backend_name is None else {"backend": backend_name}
        dist.init_process_group(init_method=f"file://{tmp_path / 'rdzv'}", rank=0, world_size=1, **kwargs)
        return dist.group.WORLD

    yield init
    if dist.is_initialized():
        dist.destroy_process_group()


@pytest.mark.parametrize("backend_name", ["gloo", None, "cpu:gloo,tpx:tpxgloo", "tpxgloo"])
def test_single_process_collectives_write_tpx_memory(single_group, backend_name):
    assert isinstance(single_group(backend_name), TpxGlooProcessGroup)
    x = torch.arange(4.0, device="tpx")
    view = to_cpu(x)
    dist.all_reduce(x, op=dist.ReduceOp.MAX)
    work = dist.all_reduce(x, async_op=True)
    work.wait()
    assert work.get_future().value()[0].device.type == "tpx"
    view.add_(1)  # the CPU view still aliases the tpx memory the collective wrote
    assert x.cpu().tolist() == [1.0, 2.0, 3.0, 4.0]
    outs = [torch.zeros(4, device="tpx")]
    dist.all_gather(outs, x)
    assert outs[0].cpu().tolist() == [1.0, 2.0, 3.0, 4.0]
    c = torch.ones(2)  # CPU tensors share the group
    dist.all_reduce(c)
    assert c.tolist() == [1.0, 1.0]
    dist.barrier()


def test_default_device_map_names_tpxgloo():
    assert dist.Backend.default_device_backend_map["tpx"] == "tpxgloo"
    assert "tpx" in dist.Backend.backend_capability["tpxgloo"]


def test_single_process_ddp_matches_cpu(single_group, tpx_config):
    from torch.nn.parallel import DistributedDataParallel as DDP

    tpx_config(matmul_precision="highest")
    single_group("gloo")
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
