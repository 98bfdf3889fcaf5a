"""CUDA programs shared by the agent tests (loaded by file path: the tests use importlib mode)."""

# The codemods fix the placement; the float64 metric needs the offline policy (one fix round).
# It sleeps a second so that a test can kill the migration while a run is going on.
POLICY_PROGRAM = '''import time

import torch

device = torch.device("cuda")


def main():
    x = torch.arange(6, dtype=torch.float32).cuda()
    w = torch.ones(6, device="cuda")
    time.sleep(1.0)
    for step in range(3):
        total = ((x + step) * w).double().sum()
        print(f"step {step} loss {total.item():.6f}")


if __name__ == "__main__":
    main()
'''
