# fix: {}
import torch
import torch.distributed as dist

# a device held as a string (catalogue 53): its type is torch.device(device).type
device = torch.accelerator.current_accelerator().type if torch.accelerator.is_available() else "cpu"


def setup():
    dist.init_process_group("nccl", init_method="env://")
