# fix: {}
import torch
import torch.distributed as dist

device = torch.device("tpx")


def setup():
    dist.init_process_group(
        init_method="env://",
        backend=f"cpu:gloo,{device.type}:{torch.distributed.Backend.default_device_backend_map.get(device.type, 'gloo')}",
    )
