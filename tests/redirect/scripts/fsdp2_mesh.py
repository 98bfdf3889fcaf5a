"""FSDP2 on a CUDA device mesh, one process (world size 1): the original CUDA code, run on the CPU."""
import os
import tempfile

import torch
import torch.distributed as dist
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import fully_shard

path = os.path.join(tempfile.mkdtemp(), "store")
dist.init_process_group("nccl", init_method=f"file://{path}", rank=0, world_size=1)
mesh = init_device_mesh(device_type="cuda", mesh_shape=(1,))
positional = init_device_mesh("cuda", (1,))
torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Tanh(), torch.nn.Linear(8, 1)).cuda()
plain = torch.nn.Sequential(*[torch.nn.Linear(4, 8), torch.nn.Tanh(), torch.nn.Linear(8, 1)])
plain.load_state_dict({k: v.detach().cpu().clone() for k, v in model.state_dict().items()})
fully_shard(model, mesh=mesh)
x = torch.randn(6, 4).cuda()
loss = model(x).square().mean()
loss.backward()
want = plain(x.cpu()).square().mean()
print(f"mesh {mesh.device_type} {positional.device_type} loss_matches {torch.allclose(loss.detach().cpu(), want)}")
dist.destroy_process_group()
