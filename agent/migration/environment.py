"""The user's environment, as far as a failed run shows it: a module the program imports that the
runs' interpreter does not have, a test runner (pytest) missing from the interpreter the tests
run with, or a torch that is installed (its metadata says 2.13.0) but fails as it imports, is
``failed_environment`` with the package and the command that mends it, never the code's fault
(``needs_human``) or something a model could fix (``needs_llm``)."""

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
# a frame of torch's own package body in a traceback: the interpreter's torch failing as it imports
_TORCH_INIT_FRAME = re.compile(r'^ {2}File "[^"\n]{0,4096}/torch/__init__\.py", line \d+, in <module>$', re.M)
_TRACEBACK = "Traceback (most recent call last):"
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


@dataclass(frozen=True)
class BrokenTorch:
    """torch is installed in the runs' interpreter but raises while it imports (a broken or partial
    install, a shared library it cannot load): the program never started."""

    error: str  # the exception, one line
    interpreter: str

    def install_command(self) -> str:
        return f"{shlex.quote(self.interpreter)} -m pip install --force-reinstall torch==2.13.0"

    def message(self) -> str:
        return (f"torch fails to import in the interpreter the runs use ({self.interpreter}): {self.error}. "
                "The program never started, so this is the environment, not the code. Reinstall torch there "
                f"({self.install_command()}), or pass --python with an environment whose `python -c 'import torch'` "
                "works, then start the migration again.")


def broken_torch(diag: Diagnosis, output: str, interpreter: str | None = None) -> BrokenTorch | None:
    """The runs' torch failing as it imports: the last traceback in ``output`` (a run's captured
    output: untrusted text, only matched) passes through torch's own ``__init__`` at module level.
    A module torch needs that is missing is ``missing_module``'s (it names the package)."""
    if not diag.exc_type or diag.exc_type == "ModuleNotFoundError":
        return None
    last = output.rsplit(_TRACEBACK, 1)
    if len(last) < 2 or _TORCH_INIT_FRAME.search(last[1]) is None:
        return None
    error = f"{diag.exc_type}: {diag.first_line.strip()[:300]}"
    return BrokenTorch(error=error, interpreter=interpreter or sys.executable)


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
                        interpreter: str | None = None) -> MissingModule | BrokenTorch | None:
    """What the runs' environment lacks for a failed run (a module the program imports, the test
    runner of a test run, a torch that imports), or None: the failure is the code's or the command's."""
    if diag.phase == "test":
        runner = missing_test_runner(output, interpreter)
        if runner is not None:
            return runner
    return missing_module(diag, known, interpreter) or broken_torch(diag, output, interpreter)


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
