"""FRY017 (memory.cuda-env): CUDA_VISIBLE_DEVICES, PYTORCH_CUDA_ALLOC_CONF, NCCL_* ... set or read in code -> review.

The same table (``tables.CUDA_ENV_VARS``) drives ``tools.scan.envfiles``, which reports these
variables in shell scripts, Dockerfiles, Makefiles, .env files and YAML job configs.

One has an exact equivalent and is rewritten: ``os.environ["NCCL_SOCKET_IFNAME"] = x`` also sets gloo's
interface, ``os.environ["NCCL_SOCKET_IFNAME"] = os.environ["GLOO_SOCKET_IFNAME"] = x`` (NCCL still reads its
own on CUDA; gloo, which carries the collectives on the CPU and on tpx, reads the other).
"""

from __future__ import annotations

import re

import libcst as cst

from tools.codemods.base import CodemodRule
from tools.codemods.nodes import code, expr, string_value
from tools.codemods.tables import cuda_env_var

#: NCCL variables gloo reads under another name with the same meaning (set in code: both are set)
_GLOO_EQUIVALENT = {"NCCL_SOCKET_IFNAME": "GLOO_SOCKET_IFNAME"}
_ENVIRON = frozenset({"os.environ"})

#: ``NAME=`` inside a longer string: a command line or ``env`` argument that sets the variable
_SETS = re.compile(r"(?<![A-Za-z0-9_])([A-Z][A-Z0-9_]*)=")


class CudaEnv(CodemodRule):
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
        if entry is not None and value in _GLOO_EQUIVALENT and self._env_assignment(node, value):
            return
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


    def _env_assignment(self, node: cst.SimpleString, name: str) -> bool:
        """Whether ``node`` names the variable of ``os.environ[name] = x`` (then rewritten, or already)."""
        index = self.parent(node)
        sub_el = self.parent(index) if isinstance(index, cst.Index) else None
        sub = self.parent(sub_el) if isinstance(sub_el, cst.SubscriptElement) else None
        target = self.parent(sub) if isinstance(sub, cst.Subscript) else None
        assign = self.parent(target) if isinstance(target, cst.AssignTarget) else None
        if not isinstance(assign, cst.Assign) or not isinstance(sub, cst.Subscript) \
                or not isinstance(target, cst.AssignTarget) or self.qname_in(sub.value, _ENVIRON) is None:
            return False
        other = _GLOO_EQUIVALENT[name]
        if any(other in code(t.target) for t in assign.targets):
            return True  # already sets both
        environ = code(sub.value)
        new_value = expr(f'{environ}["{other}"]')
        assert isinstance(new_value, cst.Subscript)
        new_target = cst.AssignTarget(target=new_value)

        def transform(updated: cst.CSTNode) -> cst.CSTNode:
            assert isinstance(updated, cst.Assign)
            return updated.with_changes(targets=[*updated.targets, new_target])

        self.hit(assign, f"{name} selects NCCL's network interface; gloo (CPU, tpx) reads {other}", category="auto",
                 suggestion=f'{code(target.target)} = {environ}["{other}"] = ...', transform=transform)
        return True


RULE = CudaEnv
