"""The user's environment, as far as a failed run shows it: a module the program imports that the
runs' interpreter does not have, or a test runner (pytest) missing from the interpreter the tests
run with, is ``failed_environment`` with the package and the command that installs it, never the
code's fault (``needs_human``) or something a model could fix (``needs_llm``)."""

from __future__ import annotations

import re
import shlex
import sys
from dataclasses import dataclass

from agent.policy.base import Diagnosis
from tools.runner.models import RunResult

_NO_MODULE = re.compile(r"No module named '(?P<name>[\w.]+)'")
# ``python -m pytest`` without pytest: runpy's one line (no traceback), "<interpreter>: No module named pytest"
_NO_RUNNER_MODULE = re.compile(r"^\S*: No module named (?P<name>pytest|nose2?|hypothesis)\s*$", re.M)
# a bare ``pytest ...`` command that the shell does not find
_NO_RUNNER_COMMAND = re.compile(r"^(?:/bin/sh: \d+: |sh: \d+: |/bin/sh: |sh: )?(?:line \d+: )?"
                                r"(?P<name>pytest|py\.test)(?::| ?: )\s*(?:not found|command not found)\s*$", re.M)
TEST_RUNNERS = {"pytest": "pytest", "py.test": "pytest", "nose": "nose", "nose2": "nose2", "hypothesis": "hypothesis"}
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

    test_runner: bool = False  # the test command's runner (pytest), not a module of the program

    def message(self) -> str:
        if self.test_runner:
            return (f"the test command needs {self.module}, which the interpreter the tests run with "
                    f"({self.interpreter}) does not have. Install it there ({self.install_command()}), or pass "
                    "--python with an environment that has it, then start the migration again.")
        return (f"the program imports '{self.module}', which the interpreter its runs use ({self.interpreter}) "
                f"does not have. Install it there ({self.install_command()}), or pass --python with the "
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


def missing_test_runner(output: str, interpreter: str | None = None) -> MissingModule | None:
    """The test runner a test run could not start (``No module named pytest`` from ``python -m
    pytest``, ``pytest: not found`` from the shell), or None."""
    m = _NO_RUNNER_MODULE.search(output) or _NO_RUNNER_COMMAND.search(output)
    if m is None:
        return None
    name = m.group("name")
    return MissingModule(module=TEST_RUNNERS.get(name, name), package=TEST_RUNNERS.get(name, name),
                         interpreter=interpreter or sys.executable, test_runner=True)


def environment_failure(diag: Diagnosis, output: str, known: list[str],
                        interpreter: str | None = None) -> MissingModule | None:
    """What the runs' environment lacks for a failed run (a module the program imports, the test
    runner of a test run), or None: the failure is the code's or the command's."""
    if diag.phase == "test":
        runner = missing_test_runner(output, interpreter)
        if runner is not None:
            return runner
    return missing_module(diag, known, interpreter)


def rendezvous_failure(run: RunResult, what: str) -> str | None:
    """Why a distributed run could not start its job (torchrun's rendezvous, a TCP store that
    nothing answers, a name that does not resolve): the message of a ``failed_environment`` status,
    or None. The program's code is not to blame and no edit of it mends this."""
    trace = run.trace
    if trace is None or trace.signature.kind != "rendezvous":
        return None
    rank = f" (rank {trace.rank})" if trace.rank is not None else ""
    return (f"{what} could not start its distributed job{rank}: {trace.exc_type.rsplit('.', 1)[-1]}: "
            f"{(trace.message.strip().splitlines() or [''])[0][:300]}. {trace.signature.detail or ''}. This is the "
            "run's environment, not the code: check that localhost resolves and loopback TCP works where Ferry "
            "runs (`ferry doctor`), then start the migration again.")
