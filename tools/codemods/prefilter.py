"""A cheap, provably safe pre-filter: a file that matches none of these patterns cannot produce
a finding, so it is not parsed.

Why it is safe: every non-contextual rule matches either (a) a qualified name, whose last
component must be spelled in the file (in the attribute access or in the import that binds
it), (b) a string literal whose value contains one of the words below, or (c) an attribute
call ``.cuda``/``.to``/``.is_cuda``. Each such spelling contains one of the substrings below
(case-insensitive), or matches the ``.to`` pattern (which allows whitespace, backslash
continuations and comments between the dot and ``to``). Contextual rules (fp16/fp64, jit,
performance) only report in files with other findings. ``tests/codemods`` checks every
fixture against this filter.
"""

from __future__ import annotations

import re

WORDS: tuple[str, ...] = (
    "cuda", "cudnn", "cublas", "nccl", "nvidia", "nvtx", "nvml", "triton", "apex", "flash_attn",
    "bitsandbytes", "xformers", "cupy", "numba", "alloc_conf", "autocast", "bf16_supported", "tf32",
    "device_ids", "output_device", "dataparallel", "syncbatchnorm", "syncbn", "pin_memory", "max-autotune",
    "reduce-overhead", "inductor", ".cu",
)
_PATTERN = re.compile(
    "|".join(re.escape(w) for w in WORDS) + r"|\.[\s\\]*(?:#[^\n]*\n[\s\\]*)*to\b",
    re.IGNORECASE,
)


def may_contain_idioms(text: str) -> bool:
    return _PATTERN.search(text) is not None
