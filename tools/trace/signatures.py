"""Stable failure signatures: a data table of rules matched against exception type + message."""

from __future__ import annotations

import re
from dataclasses import dataclass

from tools.trace.models import Signature, SignatureKind

# Packages that only exist for NVIDIA GPUs (import fails on a CPU/tpx machine).
CUDA_ONLY_PACKAGES: tuple[str, ...] = (
    "apex", "flash_attn", "flash_attn_2_cuda", "triton", "pycuda", "cupy", "cupyx", "xformers",
    "bitsandbytes", "pynvml", "nvidia", "tensorrt", "torch_tensorrt", "deepspeed", "mamba_ssm",
    "causal_conv1d", "fused_dense_lib", "transformer_engine", "nccl", "numba.cuda", "cudf",
)


RENDEZVOUS_DETAIL = ("the distributed job could not reach its rendezvous / TCP store (the run's environment: "
                     "name resolution, loopback, ports or a store timeout), not a failure of the program's code")


@dataclass(frozen=True)
class Pattern:
    """One trace signature: a regex on "ExcType: message" and the kind it names (``tools.trace.models.Signature``)."""

    kind: SignatureKind
    pattern: str  # regex on "ExcType: message"
    op_group: str | None = None  # named group holding the op / package
    detail: str = ""


PATTERNS: tuple[Pattern, ...] = (
    Pattern("cuda_unmappable", r"ferry redirect: (?P<op>[\w.]+) cannot run", "op",
            "custom CUDA kernel, Triton or CUDA graph: no device-neutral equivalent"),
    Pattern("rendezvous", r"^(?:RendezvousConnectionError|RendezvousTimeoutError|RendezvousClosedError|RendezvousError|"
            r"DistStoreError|DistNetworkError)\b|Temporary failure in name resolution|Name or service not known|"
            r"client socket has timed out after \d+m?s while trying to connect|"
            r"Timed out after \d+ seconds waiting for clients|Socket Timeout", None,
            RENDEZVOUS_DETAIL),
    Pattern("cuda_not_compiled", r"Torch not compiled with CUDA enabled", None,
            "CUDA API used on a build without CUDA"),
    Pattern("cuda_not_compiled", r"Found no NVIDIA driver|No CUDA GPUs are available|CUDA driver initialization failed|"
            r"without ATen_cuda library|Attempting to deserialize object on a CUDA device", None,
            "CUDA runtime needed but absent"),
    Pattern("tpx_oom", r"OutOfMemoryError.*tpx|tpx.*out of memory|tpx.*OutOfMemory", None,
            "tpx simulated device memory exhausted"),
    Pattern("tpx_float64", r"(?i)(float64|double).*\btpx\b|\btpx\b.*(float64|double)", None,
            "tpx has no float64"),
    Pattern("unsupported_op",
            r"aten::(?P<op>[\w.]+)'? is not (?:currently )?(?:supported|implemented)[^\n]*\b(?:tpx|PrivateUse1)", "op",
            "op not supported by the tpx backend"),
    Pattern("unsupported_op",
            r"Could not run '(?:aten::)?(?P<op>[\w.]+)' with arguments from the '(?:PrivateUse1|tpx)' backend", "op",
            "op has no kernel for the tpx backend"),
    Pattern("unsupported_op",
            r"operator '(?:aten::)?(?P<op>[\w.]+)' is not currently implemented for the (?:tpx|PrivateUse1)", "op",
            "op has no kernel for the tpx backend"),
    Pattern("unsupported_op", r"^NotImplementedError: [^\n]*\b(?:tpx|PrivateUse1)\b[^\n]*?aten::(?P<op>[\w.]+)", "op",
            "op not supported by the tpx backend"),
    Pattern("mixed_devices", r"Expected all tensors to be on the same device|found at least two devices|"
            r"Expected object of device type|is on device \S+ but expected|device mismatch", None,
            "tensors on different devices meet in one op"),
    Pattern("missing_cuda_package", r"^(?:ModuleNotFoundError|ImportError): No module named '(?P<op>[\w.]+)'", "op",
            "a CUDA-only package is not installed"),
    Pattern("syntax_error", r"^(?:SyntaxError|IndentationError|TabError)\b", None, "the code does not parse"),
    Pattern("import_error", r"^(?:ModuleNotFoundError|ImportError)\b", None, "an import failed"),
    Pattern("disk_quota", r"No space left on device|\bENOSPC\b|Disk quota exceeded", None,
            "no space left: the run's disk cap (or a full filesystem) was reached"),
    Pattern("killed_by_limit", r"^MemoryError\b|Too many open files|Resource temporarily unavailable|"
            r"File too large|Cannot allocate memory|can't start new thread", None,
            "a sandbox resource limit was reached"),
)

_COMPILED = [(rule, re.compile(rule.pattern, re.M)) for rule in PATTERNS]


def _op_of(rule: Pattern, match: re.Match[str]) -> str | None:
    if not rule.op_group:
        return None
    for name, value in match.groupdict().items():
        if name.startswith(rule.op_group) and value:
            return value
    return None


def classify(exc_type: str, message: str, extra: list[tuple[str, str]] | None = None) -> Signature:
    """Signature for an exception (``extra``: chained exceptions tried after the primary one)."""
    for etype, msg in [(exc_type, message), *(extra or [])]:
        text = f"{etype.rsplit('.', 1)[-1]}: {msg}"
        for rule, rx in _COMPILED:
            m = rx.search(text)
            if not m:
                continue
            op = _op_of(rule, m)
            if rule.kind == "missing_cuda_package":
                root = (op or "").split(".")[0]
                if root not in CUDA_ONLY_PACKAGES and op not in CUDA_ONLY_PACKAGES:
                    continue  # an ordinary missing module: falls through to import_error
                op = root
            return Signature(kind=rule.kind, op=op, detail=rule.detail)
    return Signature(kind="other")
