# fix: {"replacements": [[[10, 12, 10, 50], "torch.nn.Linear(2, 2).to(device)"], [[12, 13, 12, 47], "torch.randn(3, 2).to(device)"]]}
import torch

device = torch.accelerator.current_accelerator(check_available=True) or torch.device("cpu")



def main(local_rank):
    # the scanner's spans (1-based columns in its report, 0-based here) of two review findings
    model = torch.nn.Linear(2, 2).cuda(local_rank)
    for _ in range(2):
        x = (torch.randn(3, 2).cuda(local_rank))
        model(x)
    return model
