"""FRY017 (memory.cuda-env): CUDA_VISIBLE_DEVICES, PYTORCH_CUDA_ALLOC_CONF, NCCL_* ... set or read in code -> review.

The same table (``tables.CUDA_ENV_VARS``) drives ``tools.scan.envfiles``, which reports these
variables in shell scripts, Dockerfiles, Makefiles, .env files and YAML job configs.
"""

from __future__ import annotations

import re

import libcst as cst

from tools.codemods.base import Rule
from tools.codemods.nodes import string_value
from tools.codemods.tables import cuda_env_var

#: ``NAME=`` inside a longer string: a command line or ``env`` argument that sets the variable
_SETS = re.compile(r"(?<![A-Za-z0-9_])([A-Z][A-Z0-9_]*)=")


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
        if not value:
            return
        entry = cuda_env_var(value)
        if entry is not None:
            self.hit(node, f"{value} {entry.reason}; it has no effect on tpx/CPU", suggestion=entry.equivalent)
            return
        if isinstance(self.parent(node), cst.Expr):
            return  # a docstring or bare string statement documents, it sets nothing
        found = {m.group(1): var for m in _SETS.finditer(value) if (var := cuda_env_var(m.group(1))) is not None}
        if found:
            what = "; ".join(f"{k} {v.reason}" for k, v in found.items())
            self.hit(node, f"a command string sets {', '.join(found)}: {what}; no effect on tpx/CPU",
                     suggestion="; ".join(dict.fromkeys(f"{k}: {v.equivalent}" for k, v in found.items())))


RULE = CudaEnv
