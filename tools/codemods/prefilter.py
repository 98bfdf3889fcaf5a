"""A cheap, provably safe pre-filter: a file that matches none of these patterns cannot produce
a finding, so it is not parsed.

Why it is safe: every non-contextual rule matches either (a) a qualified name, whose last
component must be spelled in the file (in the attribute access or in the import that binds
it), (b) a string literal whose value contains one of the words below, or (c) an attribute
call ``.cuda``/``.to``/``.is_cuda``. Each such spelling contains one of the substrings below
(case-insensitive), or matches the ``.to`` pattern (which allows whitespace, backslash
continuations and comments between the dot and ``to``). Contextual rules (fp16/fp64, jit,
performance) only report in files with other findings. One rule is gated by its word on purpose:
FRY055 (integer device indices) runs only in files that mention CUDA or NCCL, where an integer device
is a CUDA ordinal. ``tests/codemods`` checks every
fixture against this filter.
"""

from __future__ import annotations

import re

_CUDA = ("cuda",)
_TO = r"\.[\s\\]*(?:#[^\n]*\n[\s\\]*)*to\b"

#: per rule: case-insensitive words, one of which the file must contain for the rule to be
#: able to fire (see the module docstring); None = contextual rule (runs after another finding)
RULE_TRIGGERS: dict[str, tuple[str, ...] | None] = {
    **{f"FRY{n:03d}": _CUDA for n in (1, 2, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 18, 19, 20, 21, 22,
                                      23, 24, 25, 26, 37, 38, 42, 53, 60, 61, 62)},
    "FRY003": (_TO,),
    "FRY054": ("cuda", "gpu"),
    # by design only in modules that mention CUDA (or NCCL, its collectives): an integer device is a CUDA
    # ordinal in code written for it
    "FRY055": ("cuda", "nccl"),
    "FRY017": ("cuda", "nccl", "cublas", "nvidia", "alloc_conf", "cudnn"),
    "FRY027": ("autocast", "cuda"),
    "FRY030": ("tf32",),
    "FRY031": ("cudnn",),
    "FRY032": ("nccl",),
    "FRY033": ("nccl",),
    "FRY034": ("device_ids",),
    "FRY035": ("device_ids", "output_device"),
    "FRY036": ("dataparallel", "syncbatchnorm", "syncbn"),
    "FRY039": ("pin_memory",),
    "FRY040": ("max-autotune", "reduce-overhead", "inductor"),
    "FRY043": ("nvtx", "nvml", "nvidia_smi"),
    "FRY044": ("cuda", ".cu"),
    "FRY045": ("triton",),
    "FRY046": ("apex",),
    "FRY047": ("flash_attn",),
    "FRY048": ("bitsandbytes", "xformers", "cupy", "pycuda", "numba"),
    "FRY049": ("cuda", "cudnn"),
    **{f"FRY{n:03d}": None for n in (28, 29, 41, 50, 51, 52)},
}


def _word(w: str) -> str:
    return w if w is _TO else re.escape(w)


_RULE_PATTERNS = {rid: re.compile("|".join(_word(w) for w in words), re.IGNORECASE)
                  for rid, words in RULE_TRIGGERS.items() if words}
_PATTERN = re.compile("|".join(sorted({_word(w) for words in RULE_TRIGGERS.values() if words for w in words})),
                      re.IGNORECASE)


def may_contain_idioms(text: str) -> bool:
    return _PATTERN.search(text) is not None


def active_rules(text: str) -> set[str]:
    """Ids of the non-contextual rules that can fire on ``text``."""
    return {rid for rid, pattern in _RULE_PATTERNS.items() if pattern.search(text)}
