"""FRY017 (memory.cuda-env): CUDA_VISIBLE_DEVICES, PYTORCH_CUDA_ALLOC_CONF, ... set or read in code -> review."""

from __future__ import annotations

import libcst as cst

from tools.codemods.base import Rule
from tools.codemods.nodes import string_value
from tools.codemods.tables import CUDA_ENV_VARS


class CudaEnv(Rule):
    ID = "FRY017"
    NAME = "memory.cuda-env"
    DESCRIPTION = ("CUDA/NCCL environment variables (CUDA_VISIBLE_DEVICES, PYTORCH_CUDA_ALLOC_CONF, "
                   "CUDA_LAUNCH_BLOCKING, CUBLAS_WORKSPACE_CONFIG, NVIDIA_TF32_OVERRIDE, ...) -> review.")
    CATEGORY = "review"
    ENTRIES = (17,)

    def visit_SimpleString(self, node: cst.SimpleString) -> None:
        value = string_value(node)
        if value in CUDA_ENV_VARS:
            self.hit(node, f"{value} only configures the NVIDIA stack; it has no effect on tpx/CPU",
                     suggestion="drop it, or use the target's own settings (TPX_* for tpx)")


RULE = CudaEnv
