"""The user's environment, as far as a failed run shows it: a module the program imports that the
runs' interpreter does not have is ``failed_environment`` with the package and the command that
installs it, never the code's fault (``needs_human``) or something a model could fix (``needs_llm``)."""

from __future__ import annotations

import re
import shlex
import sys
from dataclasses import dataclass

from agent.policy.base import Diagnosis

_NO_MODULE = re.compile(r"No module named '(?P<name>[\w.]+)'")
# Import names whose PyPI distribution is named differently (pip install <value>).
PIP_NAMES = {
    "cv2": "opencv-python", "sklearn": "scikit-learn", "skimage": "scikit-image", "yaml": "pyyaml",
    "PIL": "pillow", "bs4": "beautifulsoup4", "attr": "attrs", "Crypto": "pycryptodome",
    "dateutil": "python-dateutil", "google.protobuf": "protobuf", "sentencepiece": "sentencepiece",
    "wandb": "wandb", "tensorboardX": "tensorboardX", "torch_tb_profiler": "torch-tb-profiler",
}

# CUDA-only packages: no pip install brings them to a CPU or tpx machine; a program that needs them
# unconditionally is the code's problem (the migration guards or replaces them), not the environment's.
CUDA_ONLY = frozenset({"apex", "flash_attn", "xformers", "triton", "bitsandbytes", "deepspeed", "cupy", "pycuda",
                       "tensorrt", "transformer_engine", "mamba_ssm", "causal_conv1d", "nvidia", "pynvml"})


@dataclass(frozen=True)
class MissingModule:
    module: str  # the import name that failed (top level)
    package: str  # what pip installs
    interpreter: str

    def install_command(self) -> str:
        return f"{shlex.quote(self.interpreter)} -m pip install {shlex.quote(self.package)}"

    def message(self) -> str:
        return (f"the program imports '{self.module}', which the interpreter its runs use ({self.interpreter}) "
                f"does not have. Install it there ({self.install_command()}), or run Ferry from the "
                "environment the project uses, then start the migration again.")


def missing_module(diag: Diagnosis, known: list[str], interpreter: str | None = None) -> MissingModule | None:
    """The missing third-party module a run failed on, or None (another failure, or a module of the
    repository itself: that is the code's or the command's problem, not the environment's)."""
    if diag.exc_type not in ("ModuleNotFoundError", "ImportError"):
        return None
    m = _NO_MODULE.search(diag.message or "")
    if m is None:
        return None
    name = m.group("name")
    top = name.split(".")[0]
    repo_modules = {k.split("/")[0].removesuffix(".py") for k in known}
    if top in repo_modules or top in CUDA_ONLY:
        return None
    package = PIP_NAMES.get(name) or PIP_NAMES.get(top) or top.replace("_", "-")
    return MissingModule(module=top, package=package, interpreter=interpreter or sys.executable)
