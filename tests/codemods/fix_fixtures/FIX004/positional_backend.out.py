# fix: {}
import torch
from torch.distributed import init_process_group


def setup():
    init_process_group(f"cpu:gloo,{torch.accelerator.current_accelerator().type}:{torch.distributed.Backend.default_device_backend_map.get(torch.accelerator.current_accelerator().type, 'gloo')}", init_method="env://")
