"""OpInfo conformance: run PyTorch's own OpInfo samples on tpx and on CPU and compare.

Every float32 OpInfo entry of ``torch.testing._internal.common_methods_invocations.op_db``
is run sample by sample: the sample is generated on CPU, the op runs on CPU (the reference)
and on the target device with the same tensors moved there and the same RNG seed, and the
outputs are compared with ``torch.testing.assert_close`` (float32 defaults, NaNs equal).

Per op the verdict is one of:

``pass``         every sample the CPU could run agrees (samples refused by design, such as
                 a float64 ``dtype=`` argument, are counted apart and do not fail the op);
``fail``         a sample disagrees, or raises on the device while CPU succeeded;
``unsupported``  the device has no kernel for the op (``NotImplementedError``);
``refused``      every sample is refused by design (float64 results, data-dependent output
                 shapes in strict mode); listed apart with the reason;
``skipped``      nothing to compare (no samples, or CPU itself fails every sample).

The agreement rate is ``pass / (pass + fail + unsupported)``. ``run_sweep`` runs the whole
table in worker subprocesses (a crash in one op is recorded, not fatal);
``run_ops`` runs a list of ops in-process (used by the test subset, tests/backend/test_conformance.py).
The command line is ``benchmarks/conformance.py``; this module is its harness, outside the device
package it checks.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import math
import os
import signal
import subprocess
import sys
import tempfile
import time
import warnings
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import torch
import torch.utils._pytree as pytree

logger = logging.getLogger(__name__)

_ROOT = Path(__file__).resolve().parent.parent  # the checkout: workers run as ``-m benchmarks.opinfo_sweep`` there

STATUSES = ("pass", "fail", "unsupported", "refused", "skipped")

# Samples per op are capped so that one op with hundreds of samples cannot dominate the sweep.
DEFAULT_MAX_SAMPLES = 128
DEFAULT_OP_TIMEOUT_S = 120
_SEED = 1234


@dataclasses.dataclass
class SampleFailure:
    """The first sample that did not agree, precisely enough to reproduce it."""

    index: int
    sample: str
    error: str


@dataclasses.dataclass
class OpResult:
    """Verdict for one OpInfo entry (name + variant)."""

    key: str
    name: str
    variant: str
    status: str
    samples: int = 0
    passed: int = 0
    refused: int = 0
    cpu_errors: int = 0
    reason: str = ""
    failure: SampleFailure | None = None
    seconds: float = 0.0

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> OpResult:
        fields = dict(data)
        if fields.get("failure"):
            fields["failure"] = SampleFailure(**fields["failure"])
        return cls(**fields)


@dataclasses.dataclass
class SweepReport:
    device: str
    torch_version: str
    matmul_precision: str
    seconds: float
    results: list[OpResult]

    def counts(self) -> dict[str, int]:
        out = dict.fromkeys(STATUSES, 0)
        for r in self.results:
            out[r.status] += 1
        return out

    def agreement(self) -> float:
        c = self.counts()
        denom = c["pass"] + c["fail"] + c["unsupported"]
        return c["pass"] / denom if denom else 0.0

    def to_dict(self) -> dict[str, Any]:
        return {
            "device": self.device,
            "torch_version": self.torch_version,
            "matmul_precision": self.matmul_precision,
            "seconds": round(self.seconds, 1),
            "counts": self.counts(),
            "agreement": round(self.agreement(), 4),
            "results": [dataclasses.asdict(r) for r in self.results],
        }


class _OpTimeout(Exception):
    pass


# ---------------------------------------------------------------------------------------------
# OpInfo table


def op_key(op: Any) -> str:
    return f"{op.name}.{op.variant_test_name}" if op.variant_test_name else op.name


def float32_ops() -> list[Any]:
    """The OpInfo entries that support float32 on CPU, in op_db order."""
    from torch.testing._internal.common_methods_invocations import op_db

    return [op for op in op_db if torch.float32 in op.supported_dtypes("cpu")]


def ops_by_key(keys: Iterable[str] | None = None) -> list[Any]:
    """OpInfo entries for the given keys (``name`` or ``name.variant``); all if ``None``."""
    ops = float32_ops()
    if keys is None:
        return ops
    table = {op_key(op): op for op in ops}
    wanted = list(keys)
    missing = [k for k in wanted if k not in table]
    if missing:
        raise KeyError(f"unknown float32 OpInfo entries: {', '.join(missing)} (see float32_ops())")
    return [table[k] for k in wanted]


# ---------------------------------------------------------------------------------------------
# moving and comparing


def _copy_tensor(x: torch.Tensor, device: str) -> torch.Tensor:
    """Copy ``x`` to ``device`` keeping sizes, strides, storage offset and the whole storage
    (so ops such as ``as_strided`` that read outside the view see the same memory)."""
    x = x.detach()
    if x.layout != torch.strided or x.device.type == "meta":
        return x.to(device, copy=True)
    n = x.untyped_storage().nbytes() // max(1, x.element_size())
    if x.is_contiguous() and x.storage_offset() == 0 and x.numel() == n:
        return x.to(device, copy=True)
    try:
        base = x.new_empty(0).set_(x.untyped_storage(), 0, (n,), (1,))
        return base.to(device, copy=True).as_strided(x.size(), x.stride(), x.storage_offset())
    except Exception:  # fall back to a compact copy
        return x.to(device, copy=True)


def _names_cpu(obj: Any) -> bool:
    """True if a sample passes an explicit CPU device argument (its result may be on CPU)."""
    return any((isinstance(x, torch.device) and x.type == "cpu") or x == "cpu"
               for x in pytree.tree_leaves(obj) if isinstance(x, (str, torch.device)))


def _move(obj: Any, src: str, dst: str) -> tuple[Any, int]:
    """Copy a sample's ``src`` tensors to ``dst``; device arguments naming ``src`` follow.

    Tensors the OpInfo deliberately put elsewhere (e.g. CPU index lists) stay where they are.
    Returns the moved object and how many tensors/device arguments were moved.
    """
    moved = 0

    def leaf(x: Any) -> Any:
        nonlocal moved
        if isinstance(x, torch.Tensor) and x.device.type == src:
            moved += 1
            return _copy_tensor(x, dst)
        if isinstance(x, torch.device) and x.type == src:
            moved += 1
            return torch.device(dst)
        if isinstance(x, str) and (x == src or x.startswith(src + ":")):  # e.g. `to`'s device
            moved += 1
            return dst
        return x

    return pytree.tree_map(leaf, obj), moved


def _describe(x: Any) -> str:
    if isinstance(x, torch.Tensor):
        if x.layout != torch.strided:
            return f"Tensor{tuple(x.shape)} {str(x.dtype).replace('torch.', '')} {x.layout}"
        stride = "" if x.is_contiguous() else f" stride={tuple(x.stride())}"
        return f"Tensor{tuple(x.shape)} {str(x.dtype).replace('torch.', '')}{stride}"
    if isinstance(x, (list, tuple)):
        inner = ", ".join(_describe(v) for v in x[:8])
        more = ", ..." if len(x) > 8 else ""
        return f"[{inner}{more}]" if isinstance(x, list) else f"({inner}{more})"
    if isinstance(x, dict):
        return "{" + ", ".join(f"{k}={_describe(v)}" for k, v in x.items()) + "}"
    text = repr(x)
    return text if len(text) <= 60 else text[:57] + "..."


def describe_sample(sample: Any) -> str:
    """A compact, reproducible description of an OpInfo SampleInput."""
    parts = [_describe(sample.input)] + [_describe(a) for a in sample.args]
    parts += [f"{k}={_describe(v)}" for k, v in sample.kwargs.items()]
    return "(" + ", ".join(parts) + ")"


def _compare(actual: Any, expected: Any, device: str, values: bool, on_device: bool = True) -> None:
    """Raise AssertionError if the device result differs from the CPU result."""
    a_leaves, a_spec = pytree.tree_flatten(actual)
    e_leaves, e_spec = pytree.tree_flatten(expected)
    if len(a_leaves) != len(e_leaves):
        raise AssertionError(f"output structure differs: {a_spec} vs {e_spec}")
    for i, (a, e) in enumerate(zip(a_leaves, e_leaves, strict=True)):
        where = f"output {i}"
        if isinstance(e, torch.Tensor):
            if not isinstance(a, torch.Tensor):
                raise AssertionError(f"{where}: expected a tensor, got {type(a).__name__}")
            if on_device and a.device.type != device.split(":")[0] and e.device.type == "cpu":
                raise AssertionError(f"{where}: result is on {a.device}, expected {device}")
            if a.dtype != e.dtype or a.shape != e.shape:
                raise AssertionError(
                    f"{where}: {a.dtype}{tuple(a.shape)} vs CPU {e.dtype}{tuple(e.shape)}"
                )
            if values and e.layout == torch.strided:
                torch.testing.assert_close(
                    a.detach().cpu(), e.detach(), equal_nan=True, check_device=False,
                    check_stride=False, msg=lambda m, w=where: f"{w}: {m}",
                )
        elif isinstance(e, float) and isinstance(a, float):
            if values and not (math.isnan(a) and math.isnan(e)) and not math.isclose(
                a, e, rel_tol=1.3e-6, abs_tol=1e-5
            ):
                raise AssertionError(f"{where}: {a!r} vs CPU {e!r}")
        elif (values and type(a) is not type(e)) or (values and a != e):
            raise AssertionError(f"{where}: {a!r} vs CPU {e!r}")


def classify_error(exc: BaseException) -> tuple[str, str]:
    """Map a device-side exception to (status, reason)."""
    text = f"{type(exc).__name__}: {exc}"
    low = text.lower()
    if isinstance(exc, TypeError) and "float64" in low:
        return "refused", "float64 is not supported on the device (by design)"
    if isinstance(exc, NotImplementedError) and "strict" in low:
        return "refused", "data-dependent output shape refused in strict mode (by design)"
    if isinstance(exc, NotImplementedError) or "could not run" in low:
        return "unsupported", text.splitlines()[0][:300]
    return "fail", text.splitlines()[0][:300]


# ---------------------------------------------------------------------------------------------
# running one op


def _alarm(_signum: int, _frame: Any) -> None:
    raise _OpTimeout()


def run_op(
    op: Any,
    device: str = "tpx",
    max_samples: int = DEFAULT_MAX_SAMPLES,
    timeout_s: float = DEFAULT_OP_TIMEOUT_S,
) -> OpResult:
    """Run one OpInfo entry's float32 samples on CPU and on ``device`` and compare."""
    key = op_key(op)
    result = OpResult(key=key, name=op.name, variant=op.variant_test_name, status="skipped")
    start = time.perf_counter()
    use_alarm = timeout_s > 0 and hasattr(signal, "SIGALRM") and _in_main_thread()
    if use_alarm:
        old = signal.signal(signal.SIGALRM, _alarm)
        signal.setitimer(signal.ITIMER_REAL, timeout_s)
    try:
        _run_samples(op, device, max_samples, result)
    except _OpTimeout:
        result.status = "fail"
        result.failure = SampleFailure(result.samples, "", f"timed out after {timeout_s:.0f} s")
    finally:
        if use_alarm:
            signal.setitimer(signal.ITIMER_REAL, 0)
            signal.signal(signal.SIGALRM, old)
    result.seconds = round(time.perf_counter() - start, 3)
    return result


def _in_main_thread() -> bool:
    import threading

    return threading.current_thread() is threading.main_thread()


def _samples(op: Any, device: str, result: OpResult) -> tuple[list[Any], str]:
    """The op's float32 samples, made on ``device`` as PyTorch's device tests make them; if
    that fails the samples are made on CPU (the failure is noted in the result)."""
    try:
        return list(op.sample_inputs(device, torch.float32, requires_grad=False)), device
    except _OpTimeout:
        raise
    except Exception as exc:
        note = f"samples made on CPU (making them on {device} failed: {type(exc).__name__}: {exc})"
        result.reason = note.splitlines()[0][:300]
    try:
        return list(op.sample_inputs("cpu", torch.float32, requires_grad=False)), "cpu"
    except _OpTimeout:
        raise
    except Exception as exc:  # the OpInfo cannot build samples here at all
        result.reason = f"sample generation failed on CPU: {type(exc).__name__}: {exc}"[:300]
        return [], "cpu"


def _run_samples(op: Any, device: str, max_samples: int, result: OpResult) -> None:
    unsupported: str | None = None
    refused_reason = ""
    samples, made_on = _samples(op, device, result)
    values = not op.has_nondeterministic_output
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for index, sample in enumerate(samples[:max_samples]):
            result.samples += 1
            ref_args = (sample.input, list(sample.args), dict(sample.kwargs))
            dev_args = ref_args
            if made_on != "cpu":
                explicit_cpu = _names_cpu(ref_args)
                ref_args, moved = _move(ref_args, made_on, "cpu")
            try:
                torch.manual_seed(_SEED)
                expected = op(ref_args[0], *ref_args[1], **ref_args[2])
            except _OpTimeout:
                raise
            except Exception:
                result.cpu_errors += 1
                continue
            try:
                if made_on == "cpu":
                    explicit_cpu = False
                    dev_args, moved = _move(ref_args, "cpu", device)
                torch.manual_seed(_SEED)
                actual = op(dev_args[0], *dev_args[1], **dev_args[2])
                _compare(actual, expected, device, values, on_device=moved > 0 and not explicit_cpu)
            except _OpTimeout:
                raise
            except AssertionError as exc:
                result.status = "fail"
                result.failure = SampleFailure(index, describe_sample(sample), _first_lines(exc))
                return
            except Exception as exc:
                status, reason = classify_error(exc)
                if status == "refused":
                    result.refused += 1
                    refused_reason = reason
                    continue
                if status == "unsupported":
                    unsupported = reason
                    result.failure = SampleFailure(index, describe_sample(sample), reason)
                    break
                result.status = "fail"
                result.failure = SampleFailure(index, describe_sample(sample), reason)
                return
            result.passed += 1
    if unsupported is not None:
        result.status, result.reason = "unsupported", unsupported
    elif result.passed:
        result.status = "pass"
        if result.refused:
            result.reason = f"{result.refused} sample(s) refused: {refused_reason}"
    elif result.refused:
        result.status, result.reason = "refused", refused_reason
    else:
        result.status = "skipped"
        result.reason = result.reason or (
            "CPU fails every sample" if result.cpu_errors else "no float32 samples"
        )


def _first_lines(exc: BaseException, n: int = 4) -> str:
    lines = [ln for ln in str(exc).splitlines() if ln.strip()]
    return " | ".join(lines[:n])[:500]


# ---------------------------------------------------------------------------------------------
# setup shared by in-process runs and workers


def prepare(device: str, strict: bool = False) -> None:
    """Load the device and force full-fp32 matmuls ("highest") on CPU and on the device.

    Changes process-wide settings (tpx config, torch's matmul precision); callers that share
    the process save and restore them.
    """
    if torch.get_float32_matmul_precision() != "highest":
        torch.set_float32_matmul_precision("highest")
    if device == "cpu":
        return
    import backend  # registers tpx (idempotent)

    backend.configure(matmul_precision="highest", strict=strict)


def run_ops(
    keys: Sequence[str] | None,
    device: str = "tpx",
    max_samples: int = DEFAULT_MAX_SAMPLES,
    timeout_s: float = DEFAULT_OP_TIMEOUT_S,
    strict: bool = False,
) -> SweepReport:
    """Run the given ops (all float32 ops if ``None``) in this process."""
    prepare(device, strict)
    start = time.perf_counter()
    results = [run_op(op, device, max_samples, timeout_s) for op in ops_by_key(keys)]
    return SweepReport(
        device=device,
        torch_version=torch.__version__,
        matmul_precision=torch.get_float32_matmul_precision(),
        seconds=time.perf_counter() - start,
        results=results,
    )


# ---------------------------------------------------------------------------------------------
# the full sweep in worker subprocesses


def _worker_main(argv: Sequence[str]) -> int:
    """``python -m benchmarks.opinfo_sweep DEVICE OUT_JSONL MAX_SAMPLES TIMEOUT STRICT KEY...``"""
    device, out_path, max_samples, timeout_s, strict, *keys = argv
    torch.set_num_threads(1)
    prepare(device, strict == "1")
    ops = ops_by_key(keys)
    with open(out_path, "a", encoding="utf-8") as out:
        for op in ops:
            out.write(json.dumps({"start": op_key(op)}) + "\n")
            out.flush()
            res = run_op(op, device, int(max_samples), float(timeout_s))
            out.write(json.dumps({"result": dataclasses.asdict(res)}) + "\n")
            out.flush()
    return 0


def _read_progress(path: Path) -> tuple[dict[str, OpResult], str | None]:
    done: dict[str, OpResult] = {}
    started: str | None = None
    if not path.exists():
        return done, None
    for line in path.read_text(encoding="utf-8").splitlines():
        if not line.strip():
            continue
        rec = json.loads(line)
        if "start" in rec:
            started = rec["start"]
        else:
            res = OpResult.from_dict(rec["result"])
            done[res.key] = res
            started = None
    return done, started


def run_sweep(
    keys: Sequence[str] | None = None,
    device: str = "tpx",
    jobs: int = 2,
    max_samples: int = DEFAULT_MAX_SAMPLES,
    timeout_s: float = DEFAULT_OP_TIMEOUT_S,
    strict: bool = False,
) -> SweepReport:
    """Run the sweep in ``jobs`` worker processes; an op that kills its worker is a ``fail``."""
    all_keys = [op_key(op) for op in ops_by_key(keys)]
    shards = [all_keys[i::jobs] for i in range(max(1, jobs))]
    start = time.perf_counter()
    results: dict[str, OpResult] = {}
    with tempfile.TemporaryDirectory(prefix="tpx-conformance-") as tmp:
        pending = [(i, shard) for i, shard in enumerate(shards) if shard]
        procs: dict[int, tuple[subprocess.Popen[bytes], list[str], Path]] = {}
        attempt = 0

        def launch(i: int, shard: list[str]) -> None:
            nonlocal attempt
            attempt += 1
            path = Path(tmp) / f"shard{i}-{attempt}.jsonl"
            cmd = [sys.executable, "-m", "benchmarks.opinfo_sweep", device, str(path),
                   str(max_samples), str(timeout_s), "1" if strict else "0", *shard]
            env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONWARNINGS="ignore")
            with open(path.with_suffix(".stderr"), "wb") as err:  # cwd: the checkout (benchmarks/ not on sys.path)
                procs[i] = (subprocess.Popen(cmd, env=env, cwd=_ROOT, stdout=subprocess.DEVNULL, stderr=err),
                            shard, path)

        for i, shard in pending:
            launch(i, shard)
        while procs:
            time.sleep(0.5)
            for i in list(procs):
                proc, shard, path = procs[i]
                if proc.poll() is None:
                    continue
                stderr = path.with_suffix(".stderr").read_text(errors="replace") \
                    if path.with_suffix(".stderr").exists() else ""
                del procs[i]
                done, started = _read_progress(path)
                results.update(done)
                if proc.returncode == 0:
                    continue
                if started is None:  # died outside an op (startup): record every op of the shard
                    tail = stderr.strip().splitlines()[-1:] or ["no output"]
                    for k in shard:
                        if k not in results:
                            results[k] = OpResult(k, k.split(".")[0], "", "fail",
                                                  failure=SampleFailure(-1, "", f"worker failed: {tail[0]}"))
                    continue
                logger.warning("op %s killed its worker (exit %s)", started, proc.returncode)
                results[started] = OpResult(
                    started, started.split(".")[0], "", "fail",
                    failure=SampleFailure(-1, "", f"worker process died (exit {proc.returncode})"),
                )
                rest = [k for k in shard if k not in results]
                if rest:
                    launch(i, rest)
    ordered = [results[k] for k in all_keys if k in results]
    return SweepReport(
        device=device,
        torch_version=torch.__version__,
        matmul_precision="highest",
        seconds=time.perf_counter() - start,
        results=ordered,
    )


if __name__ == "__main__":
    sys.exit(_worker_main(sys.argv[1:]))
