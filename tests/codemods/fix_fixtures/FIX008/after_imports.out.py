# fix: {}
import argparse

import torch as T
if T.accelerator.is_available() and T.accelerator.current_accelerator().type == "tpx":
    T.set_float32_matmul_precision("highest")  # ferry: target matmul precision: full fp32 matmuls on tpx

print(T.ones(1))
