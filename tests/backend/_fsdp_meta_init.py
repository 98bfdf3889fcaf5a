"""The common FSDP2 example on tpx, run by torchrun (tests/backend/test_rng_fsdp.py).

``torchrun --nproc-per-node 2 _fsdp_meta_init.py OUT SEED [example]``: the model is built on ``meta``,
sharded with ``fully_shard``, materialised with ``to_empty(device="tpx")`` and initialised with
``reset_parameters()`` (DTensor random ops on tpx's generator), then trained one step with dropout.
Each rank writes ``OUT.<rank>`` (JSON): its local shards, the full parameters, the tpx RNG state.
``example``: as pytorch/examples' FSDP2 script does it: no device selected by the program (only
``device_id=`` of ``init_process_group`` and ``tpx:<rank>`` devices), the default mesh of ``fully_shard``.
``cpu``: the same program on CPU with gloo (what a reference run with CUDA redirected to CPU does).
"""

from __future__ import annotations

import faulthandler
import json
import os
import sys

import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import fully_shard


def main(out: str, seed: int, mode: str = "") -> None:
    faulthandler.dump_traceback_later(120, exit=True)
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    device: str | torch.device = "tpx"
    if mode == "cpu":
        device = "cpu"
        dist.init_process_group(backend="gloo")
        mesh = init_device_mesh("cpu", (world,))
    elif mode == "example":
        device = torch.device(f"tpx:{os.environ['LOCAL_RANK']}")
        dist.init_process_group(backend=dist.get_default_backend_for_device(device), device_id=device)
        mesh = None  # fully_shard's default: a 1-D mesh over the world, made by DeviceMesh itself
    else:
        torch.accelerator.set_device_index(int(os.environ["LOCAL_RANK"]))
        mesh = init_device_mesh("tpx", (world,))
    torch.manual_seed(seed)
    with torch.device("meta"):
        model = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Dropout(0.25), nn.Linear(32, 8))
    for layer in (model[0], model[3]):
        fully_shard(layer, mesh=mesh)
    fully_shard(model, mesh=mesh)
    model.to_empty(device=device)
    for module in model.modules():
        if hasattr(module, "reset_parameters"):
            module.reset_parameters()
    res: dict = {
        "devices": sorted({str(p.to_local().device) for p in model.parameters()}),
        "local": {k: p.to_local().cpu().tolist() for k, p in model.named_parameters()},
        "full": {k: p.full_tensor().cpu().tolist() for k, p in model.named_parameters()},
    }
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    x = torch.randn(4, 16, device=device)  # the same on every rank (same seed, same offset)
    loss = model(x).pow(2).mean()
    loss.backward()
    opt.step()
    res["loss"] = loss.item()
    res["trained"] = {k: p.full_tensor().cpu().tolist() for k, p in model.named_parameters()}
    if device != "cpu":
        res["rng_state"] = torch.tpx.get_rng_state().view(torch.int64).tolist()
    with open(f"{out}.{rank}", "w") as f:
        json.dump(res, f)
    dist.destroy_process_group()
    # This script checks the generator, not the exit: a worker's interpreter teardown after FSDP2 on tpx
    # sometimes aborts ("terminate called without an active exception", seen once in CI; issue 33 item 5
    # notes it). Leave without the interpreter's teardown once the results are written.
    sys.stdout.flush()
    os._exit(0)


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]), *sys.argv[3:4])
