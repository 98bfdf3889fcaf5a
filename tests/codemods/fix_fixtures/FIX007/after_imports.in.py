# fix: {"statement": "torch.set_float32_matmul_precision(\"highest\")  # full fp32 matmuls\n"}
"""doc"""

import argparse

try:
    import yaml
except ImportError:
    yaml = None
import torch


def main():
    pass
