"""Which printed ``name value`` pairs are metrics worth comparing (the default scalar rules).

Tables as data, used by ``tools.probe.scalars.parse_scalars`` with the default pattern (a
``FERRY_PROBE_SCALAR_PATTERN`` of the user's own decides alone). A printed number is compared
between the reference and the target run only when both must print the same value: a result
(loss, error, residual, energy, accuracy, learning rate...), not a measurement of the machine.

- A name with a word of timing, throughput, memory, device or process identity (``time``,
  ``elapsed``, ``tok/s``, ``mfu``, ``max_memory_allocated``, ``cuda:0``, ``rank``, ``pid``)
  is never compared: those differ between any two runs, or between the CPU and tpx by design.
- A name made only of step-coordinate words (``step``, ``epoch``, ``iter``, ``batch``, a bare
  ``t``) is the x-axis of a curve, not a result: a program that printed only its step counter
  would otherwise "pass" parity on no evidence.
- The ``name value`` shape (a space, no ``=`` or ``:``) is also how prose reads ("Processed 1000
  images", "using 4 workers"), so there the name must contain a metric word; ``name=value`` and
  ``name: value`` count for any other name.
- A value followed by a unit of time, memory or rate (``3.2 s``, ``512 MB``, ``12 it/s``) is a
  measurement, whatever its name.

Standard library only: this runs inside the user's process.
"""

from __future__ import annotations

import re

# Words that make a name a measurement of the machine, not of the computation.
MACHINE_WORDS = frozenset({
    # timings and throughput
    "time", "times", "timing", "timer", "elapsed", "duration", "took", "eta", "wall", "walltime", "clock",
    "latency", "sec", "secs", "second", "seconds", "ms", "msec", "us", "usec", "ns", "minute", "minutes",
    "hour", "hours", "s", "throughput", "speed", "fps", "tps", "qps", "sps", "ips", "tok", "toks",
    "mfu", "hfu", "flops", "tflops", "gflops", "mflops", "per", "timestamp", "date", "datetime", "now",
    "progress", "remaining", "runtime", "flos",
    # memory
    "mem", "memory", "alloc", "allocated", "reserved", "cached", "rss", "maxrss", "vram", "ram", "heap",
    "kb", "mb", "gb", "tb", "kib", "mib", "gib", "tib", "byte", "bytes",
    # devices, processes, identities
    "cuda", "gpu", "gpus", "cpu", "cpus", "cores", "tpx", "mps", "xla", "xpu", "hpu", "npu", "privateuseone",
    "device", "devices", "rank", "ranks", "world", "node", "nodes", "pid", "ppid", "tid", "port", "host",
    "worker", "workers", "thread", "threads", "process", "processes", "proc", "seed", "version", "id", "uid",
})
# Words of a step coordinate; a name made only of these (and qualifiers) is not a result.
COORDINATE_WORDS = frozenset({
    "step", "steps", "epoch", "epochs", "iter", "iters", "iteration", "iterations", "it", "batch", "batches",
    "timestep", "timesteps", "t", "idx", "index", "global", "num", "total", "cur", "current", "n", "of",
})
# Substrings that make a ``name value`` pair (separated by a space only) a metric.
METRIC_WORDS = (
    "loss", "acc", "ppl", "perplexity", "err", "score", "norm", "reward", "f1", "bleu", "rouge", "auc", "mse",
    "mae", "rmse", "nll", "kl", "logit", "metric", "resid", "energy", "lr", "grad", "precision", "recall",
    "iou", "dice", "psnr", "ssim", "entropy", "likelihood", "elbo", "divergence", "cost", "objective",
)
# A unit right after the value: the number is a measurement (time, memory, a rate).
UNIT_AFTER = re.compile(
    r"\s*(?:s|sec|secs|seconds?|ms|msecs?|us|µs|ns|mins?|minutes?|hrs?|hours?|[kmgt]i?b|bytes?|"
    r"[kmgt]?flops|[a-z]+/s(?:ec)?|s/[a-z]+)(?![A-Za-z0-9_/])(?!\s*[=:])",
    re.IGNORECASE,
)
_CAMEL = re.compile(r"(?<=[a-z])(?=[A-Z])")
_WORD = re.compile(r"[a-z]+")


def name_words(name: str) -> list[str]:
    """``max_memory_allocated`` -> [max, memory, allocated]; ``valLoss`` -> [val, loss]; ``gpu0`` -> [gpu]."""
    return _WORD.findall(_CAMEL.sub(" ", name).lower())


def is_metric_name(name: str, spaced: bool) -> bool:
    """Whether a value printed under ``name`` is compared (``spaced``: printed as ``name value``)."""
    words = name_words(name)
    if not words or any(w in MACHINE_WORDS for w in words):
        return False
    if all(w in COORDINATE_WORDS for w in words):
        return False
    if spaced:
        lowered = name.lower()
        return any(m in lowered for m in METRIC_WORDS)
    return True


def unit_follows(rest: str) -> bool:
    """Whether the text after a value starts with a unit of time, memory or rate (``" s"``, ``" MB"``)."""
    return UNIT_AFTER.match(rest) is not None
