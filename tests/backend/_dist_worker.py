"""2-process workers for tests/backend/test_distributed*.py (run as a script, ranks forked).

``python _dist_worker.py SCENARIO INIT OUT``: spawns 2 ranks, rank r on ``tpx:r``; each writes
``OUT.r`` (JSON). The single-process reference (the same model trained in one process on the
whole batch) is computed in each rank without any collective, so the two are side by side.
"""

from __future__ import annotations

import copy
import faulthandler
import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import torch
import torch.distributed as dist
import torch.distributed.nn  # before any group exists: its functions default to the group of import time
import torch.multiprocessing as mp
from torch import nn

import backend

WORLD = 2


def _init(mode: str, url: str, rank: int) -> None:
    kw = {"init_method": url, "rank": rank, "world_size": WORLD}
    if mode == "none":  # no backend: the accelerator's (tpx) default
        dist.init_process_group(**kw)
    elif mode == "device_id":
        dist.init_process_group(device_id=torch.device("tpx", rank), **kw)
    elif mode == "default_for_device":  # what the migration codemods write
        dist.init_process_group(backend=dist.get_default_backend_for_device(torch.device("tpx", rank)), **kw)
    elif mode == "env":  # torchrun-style environment; init_device_mesh initialises the group itself
        host, port = url.removeprefix("tcp://").split(":")
        os.environ.update(MASTER_ADDR=host, MASTER_PORT=port, RANK=str(rank), WORLD_SIZE=str(WORLD),
                          LOCAL_RANK=str(rank))
    else:
        dist.init_process_group(backend=mode, **kw)


def _mlp() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(8, 16), nn.Tanh(), nn.Linear(16, 4))


def _batches(steps: int = 3, n: int = 8) -> list[tuple[torch.Tensor, torch.Tensor]]:
    g = torch.Generator().manual_seed(1)
    return [(torch.randn(n, 8, generator=g), torch.randn(n, 4, generator=g)) for _ in range(steps)]


def _train(model: nn.Module, device: torch.device, batches, rank: int | None) -> nn.Module:
    """SGD with momentum; ``rank`` set: this rank's half of every batch (data parallel)."""
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    for x, y in batches:
        if rank is not None:
            x, y = x.chunk(WORLD)[rank], y.chunk(WORLD)[rank]
        loss = nn.functional.mse_loss(model(x.to(device)), y.to(device))
        opt.zero_grad()
        loss.backward()
        opt.step()
    return model


def _full(p: torch.Tensor) -> torch.Tensor:
    from torch.distributed.tensor import DTensor

    return (p.full_tensor() if isinstance(p, DTensor) else p).detach().cpu()


def _compare(model: nn.Module, ref: nn.Module) -> dict:
    init = [p.detach() for p in _mlp().parameters()]
    got = [_full(p) for p in model.parameters()]
    want = [p.detach().cpu() for p in ref.parameters()]
    return {"max_diff": max((a - b).abs().max().item() for a, b in zip(got, want, strict=True)),
            "changed": min((a - b).abs().max().item() for a, b in zip(got, init, strict=True)),
            "devices": sorted({str(p.device) for p in model.parameters()})}


def collectives(rank: int, dev: torch.device) -> dict:
    res: dict = {"group": type(dist.group.WORLD).__name__, "backend": dist.get_backend()}
    x = torch.full((4,), float(rank + 1), device=dev)
    ptr = x.data_ptr()
    dist.all_reduce(x)
    res["all_reduce"] = x.cpu().tolist()
    res["in_place"] = x.data_ptr() == ptr and x.device == dev
    a = torch.full((2,), float(rank + 1), device=dev)
    dist.all_reduce(a, op=dist.ReduceOp.AVG)
    m = torch.full((2,), float(rank + 1), device=dev)
    work = dist.all_reduce(m, op=dist.ReduceOp.MAX, async_op=True)
    work.wait()
    res["avg_max"] = [a.cpu().tolist(), m.cpu().tolist(), str(work.get_future().value()[0].device)]
    b = torch.full((3,), float(rank * 10), device=dev)
    dist.broadcast(b, src=1)
    res["broadcast"] = b.cpu().tolist()
    outs = [torch.zeros(2, device=dev) for _ in range(WORLD)]
    dist.all_gather(outs, torch.full((2,), float(rank), device=dev))
    res["all_gather"] = [o.cpu().tolist() for o in outs]
    flat = torch.zeros(2 * WORLD, device=dev)
    dist.all_gather_into_tensor(flat, torch.full((2,), float(rank), device=dev))
    res["all_gather_into_tensor"] = flat.cpu().tolist()
    rs = torch.zeros(2, device=dev)
    dist.reduce_scatter_tensor(rs, torch.arange(4.0, device=dev) + rank)
    res["reduce_scatter_tensor"] = rs.cpu().tolist()
    a2a = torch.zeros(4, device=dev)
    dist.all_to_all_single(a2a, torch.arange(4.0, device=dev) + 10 * rank)
    res["all_to_all_single"] = a2a.cpu().tolist()
    lst = [torch.zeros(1, device=dev) for _ in range(WORLD)]
    dist.all_to_all(lst, [torch.full((1,), float(10 * rank + j), device=dev) for j in range(WORLD)])
    res["all_to_all"] = [t.item() for t in lst]
    peer = 1 - rank
    if rank == 0:
        dist.send(torch.full((3,), 7.0, device=dev), dst=peer)
        got = torch.zeros(3, device=dev)
        dist.recv(got, src=peer)
    else:
        got = torch.zeros(3, device=dev)
        dist.recv(got, src=peer)
        dist.send(got * 2, dst=peer)
    res["send_recv"] = got.cpu().tolist()
    # both ranks post their send before their recv: needs sends that do not wait for the peer
    ring_in = torch.zeros(2, device=dev)
    ops = [dist.P2POp(dist.isend, torch.full((2,), float(rank), device=dev), peer),
           dist.P2POp(dist.irecv, ring_in, peer)]
    for w in dist.batch_isend_irecv(ops):
        w.wait()
    res["batch_isend_irecv"] = ring_in.cpu().tolist()
    c = torch.ones(2)  # CPU tensors share the group
    dist.all_reduce(c)
    res["cpu_all_reduce"] = c.tolist()
    objs: list = [None] * WORLD
    dist.all_gather_object(objs, {"rank": rank})
    res["all_gather_object"] = objs
    dist.barrier()

    ref = _train(_mlp().to(dev), dev, _batches(), None)  # one process, the whole batch
    from torch.nn.parallel import DistributedDataParallel as DDP

    ddp = DDP(_mlp().to(dev), device_ids=[dev.index] if dev.index is not None else None)
    _train(ddp, dev, _batches(), rank)
    res["ddp"] = _compare(ddp.module, ref)
    return res


def fsdp(rank: int, dev: torch.device) -> dict:
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard

    mesh = init_device_mesh("tpx", (WORLD,))
    res: dict = {"group": type(dist.group.WORLD).__name__, "mesh": str(mesh.device_type)}
    ref = _train(_mlp().to(dev), dev, _batches(), None)
    model = _mlp().to(dev)
    for layer in (model[0], model[2]):
        fully_shard(layer, mesh=mesh)
    fully_shard(model, mesh=mesh)
    res["sharded"] = [tuple(p.to_local().shape) for p in model.parameters()]
    _train(model, dev, _batches(), rank)
    res["fsdp"] = _compare(model, ref)
    return res


def tensor_parallel(rank: int, dev: torch.device) -> dict:
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import Replicate, Shard, distribute_tensor
    from torch.distributed.tensor.parallel import (
        ColwiseParallel,
        RowwiseParallel,
        SequenceParallel,
        parallelize_module,
    )

    mesh = init_device_mesh("tpx", (WORLD,))
    res: dict = {}
    # DTensor basics
    full = torch.arange(24.0).reshape(4, 6)
    d = distribute_tensor(full.to(dev), mesh, [Shard(0)])
    res["dtensor_local"] = [list(d.to_local().shape), str(d.to_local().device)]
    res["dtensor_full"] = d.full_tensor().cpu().equal(full)
    res["dtensor_replicate"] = d.redistribute(mesh, [Replicate()]).to_local().cpu().equal(full)
    w = distribute_tensor(torch.ones(6, 3, device=dev), mesh, [Shard(0)])
    prod = (d.redistribute(mesh, [Shard(1)]) @ w).full_tensor()
    res["dtensor_matmul"] = prod.cpu().equal(full @ torch.ones(6, 3))

    # tensor parallel: the same batch on both ranks, weights split column- then row-wise
    ref = _train(_mlp().to(dev), dev, _batches(), None)
    tp = parallelize_module(_mlp().to(dev), mesh, {"0": ColwiseParallel(), "2": RowwiseParallel()})
    res["tp_local"] = [tuple(p.to_local().shape) for p in tp.parameters()]
    _train(tp, dev, _batches(), None)
    res["tp"] = _compare(tp, ref)

    # sequence parallel: LayerNorm on this rank's half of the sequence, then the TP MLP
    torch.manual_seed(0)
    seq = nn.Sequential(nn.LayerNorm(8), nn.Linear(8, 16), nn.Tanh(), nn.Linear(16, 4))
    seq_ref = copy.deepcopy(seq).to(dev)
    sp = parallelize_module(seq.to(dev), mesh, {
        "0": SequenceParallel(),
        "1": ColwiseParallel(input_layouts=Shard(1)),
        "3": RowwiseParallel(output_layouts=Replicate()),
    })
    g = torch.Generator().manual_seed(2)
    opt, ref_opt = (torch.optim.SGD(m.parameters(), lr=0.1) for m in (sp, seq_ref))
    for _ in range(2):
        x, y = torch.randn(2, 6, 8, generator=g).to(dev), torch.randn(2, 6, 4, generator=g).to(dev)
        for m, o, inp in ((sp, opt, x.chunk(WORLD, dim=1)[rank]), (seq_ref, ref_opt, x)):
            loss = nn.functional.mse_loss(m(inp), y)
            o.zero_grad()
            loss.backward()
            o.step()
    got, want = [_full(p) for p in sp.parameters()], [p.detach().cpu() for p in seq_ref.parameters()]
    res["sp"] = {"max_diff": max((a - b).abs().max().item() for a, b in zip(got, want, strict=True))}
    return res


def completion_holding_the_gil(rank: int, dev: torch.device) -> dict:
    """Rank 0 starts an all_reduce that rank 1 joins 1 s late, then keeps the GIL (a switch interval
    of 1000 s: the thread gives the GIL up only when it blocks) while it polls the work. The work must
    complete all the same: nothing gloo's worker thread does for a collective may need the GIL. (When
    it did, a DDP script's end could hang: freeing the reducer joins that thread with the GIL held.)"""
    group = dist.group.WORLD
    out = torch.full((3,), float(rank + 1), device=dev)
    if rank == 1:
        time.sleep(1.0)
        group.allreduce([out]).wait()
        return {"completed": True, "value": out.cpu().tolist()}
    old = sys.getswitchinterval()
    sys.setswitchinterval(1000.0)
    try:
        work = group.allreduce([out])
        deadline = time.monotonic() + 8.0
        while not work.is_completed() and time.monotonic() < deadline:
            pass
        completed = work.is_completed()
    finally:
        sys.setswitchinterval(old)
    work.wait()
    return {"completed": completed, "value": out.cpu().tolist()}


def reducer_frees_the_group(rank: int, dev: torch.device) -> dict:
    """A DDP script's end: the group destroyed, then the model freed, its reducer holding the group's
    last reference c10d knows of, while gloo's worker thread still runs a collective (rank 1 joins it
    2 s late) whose tensors only gloo holds: when that thread finishes, it frees them (their Python
    objects: the GIL). If freeing the reducer freed gloo, gloo would join that thread under the GIL."""
    group = dist.group.WORLD
    model = nn.parallel.DistributedDataParallel(nn.Linear(4, 1).to(dev))
    model(torch.ones(2, 4, device=dev)).sum().backward()
    if rank == 1:
        time.sleep(2.0)
    group.allreduce([torch.ones(3, device=dev)])  # nothing here keeps the work or its tensors
    dist.destroy_process_group()
    del group
    t0 = time.monotonic()
    del model
    return {"freed_in_s": round(time.monotonic() - t0)}


SCENARIOS = {"collectives": collectives, "fsdp": fsdp, "tp": tensor_parallel, "gil": completion_holding_the_gil,
             "reducer_frees_the_group": reducer_frees_the_group}


def worker(rank: int, scenario: str, mode: str, url: str, out: str) -> None:
    faulthandler.dump_traceback_later(180, exit=True)  # a hang shows its stacks before the test's timeout
    backend.configure(matmul_precision="highest")
    dev = torch.device("tpx", rank)
    torch.accelerator.set_device_index(rank)
    _init(mode, url, rank)
    res = SCENARIOS[scenario](rank, dev)
    with open(f"{out}.{rank}", "w") as f:
        json.dump(res, f)
    if dist.is_initialized():
        dist.destroy_process_group()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def run_workers(tmp_path: Path, scenario: str, mode: str, init: str = "tcp", timeout: float = 240) -> list[dict]:
    """Runs ``scenario`` in 2 processes (rank r on tpx:r) and returns each rank's JSON result."""
    url = f"file://{tmp_path / 'rdzv'}" if init == "file" else f"tcp://127.0.0.1:{_free_port()}"
    out = tmp_path / "result"
    env = {**os.environ, "TPX_DEVICE_COUNT": "2", "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
    proc = subprocess.run([sys.executable, __file__, scenario, mode, url, str(out)],
                          capture_output=True, text=True, timeout=timeout, env=env)
    assert proc.returncode == 0, proc.stderr[-4000:]
    return [json.loads((tmp_path / f"result.{rank}").read_text()) for rank in range(WORLD)]


if __name__ == "__main__":
    scenario, mode, url, out = sys.argv[1:5]
    # fork: the ranks start from this process's imports (torch, tpx) instead of importing them again
    mp.start_processes(worker, args=(scenario, mode, url, out), nprocs=WORLD, start_method="fork")
