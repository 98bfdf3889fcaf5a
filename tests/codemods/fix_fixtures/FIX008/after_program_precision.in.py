# fix: {}
"""Train with the usual speed flags (as FRY030 leaves them)."""

import torch
import torch.backends.cudnn as cudnn

torch.set_float32_matmul_precision("high")
cudnn.allow_tf32 = True
cudnn.benchmark = True

device = torch.device("cpu")


def main():
    print(torch.get_float32_matmul_precision())


if __name__ == "__main__":
    main()
