# fix: {}
import torch
import torch.distributed as dist

device = torch.device("tpx")


def setup():
    dist.init_process_group(
        init_method="env://",
    )
