"""FRY017 (memory.cuda-env): CUDA_VISIBLE_DEVICES, PYTORCH_CUDA_ALLOC_CONF, NCCL_* ... set or read in code -> review.

The same table (``tables.CUDA_ENV_VARS``) drives ``tools.scan.envfiles``, which reports these
variables in shell scripts, Dockerfiles, Makefiles, .env files and YAML job configs.
"""

from __future__ import annotations

import libcst as cst

from tools.codemods.base import Rule
from tools.codemods.nodes import string_value
from tools.codemods.tables import cuda_env_var


class CudaEnv(Rule):
    ID = "FRY017"
    NAME = "memory.cuda-env"
    DESCRIPTION = ("CUDA/NCCL environment variables (CUDA_VISIBLE_DEVICES, PYTORCH_CUDA_ALLOC_CONF, "
                   "CUDA_LAUNCH_BLOCKING, CUBLAS_WORKSPACE_CONFIG, NVIDIA_TF32_OVERRIDE, NCCL_*, ...) in Python "
                   "string literals and in shell scripts, Dockerfiles, Makefiles, .env files and YAML job configs "
                   "-> review, with the target's equivalent.")
    CATEGORY = "review"
    ENTRIES = (17,)

    def visit_SimpleString(self, node: cst.SimpleString) -> None:
        value = string_value(node)
        entry = cuda_env_var(value) if value else None
        if entry is not None:
            self.hit(node, f"{value} {entry.reason}; it has no effect on tpx/CPU", suggestion=entry.equivalent)


RULE = CudaEnv
