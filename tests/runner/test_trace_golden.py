"""Golden tests: tracebacks produced by real sandboxed runs (golden/make_goldens.py) parse right."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tools.trace import parse_trace

GOLDEN = Path(__file__).resolve().parent / "golden" / "out"

# case -> (exc_type, signature kind, op, innermost user frame "file:line", extra checks)
EXPECTED = {
    "chained_cause": ("RuntimeError", "other", None, "chained_cause.py:5"),
    "chained_context": ("KeyError", "other", None, "chained_context.py:8"),
    "cuda_not_compiled": ("AssertionError", "cuda_not_compiled", None, "cuda_not_compiled.py:5"),
    "dataloader_worker": ("ValueError", "other", None, "dataloader_worker.py:11"),
    "memory_error": ("MemoryError", "killed_by_limit", None, "memory_error.py:3"),
    "missing_flash_attn": ("ModuleNotFoundError", "missing_cuda_package", "flash_attn", "missing_flash_attn.py:2"),
    "missing_plain_module": ("ModuleNotFoundError", "import_error", None, "missing_plain_module.py:1"),
    "mixed_devices": ("RuntimeError", "mixed_devices", None, "mixed_devices.py:5"),
    "subprocess_fail": ("ValueError", "other", None, "<string>:2"),
    "syntax_error": ("SyntaxError", "syntax_error", None, "syntax_error.py:1"),
    "tpx_float64": ("TypeError", "tpx_float64", None, "tpx_float64.py:4"),
    "tpx_oom": ("torch.OutOfMemoryError", "tpx_oom", None, "tpx_oom.py:5"),
    "tpx_unsupported_op": ("NotImplementedError", "unsupported_op", "nonzero", "tpx_unsupported_op.py:4"),
    "test_pytest_fail": ("AssertionError", "other", None, "test_pytest_fail.py:2"),
    "test_pytest_fail_native": ("AssertionError", "other", None, "test_pytest_fail.py:2"),
}


def _load(case: str):
    d = GOLDEN / case
    meta = json.loads((d / "meta.json").read_text())
    junit = d / "junit.xml"
    trace = parse_trace((d / "stderr.txt").read_text(), stdout=(d / "stdout.txt").read_text(),
                        repo_roots=[meta["workspace"]] if meta["workspace"] else [],
                        library_roots=["/work/main"], junit_xml=junit if junit.exists() else None)
    return meta, trace


@pytest.mark.parametrize("case", sorted(EXPECTED))
def test_golden_trace(case: str):
    exc_type, kind, op, where = EXPECTED[case]
    meta, trace = _load(case)
    assert meta["status"] == "failed"
    assert trace is not None, f"{case}: no trace parsed"
    assert trace.exc_type == exc_type
    assert trace.signature.kind == kind
    assert trace.signature.op == op
    assert trace.location == where
    # User frames are repo-relative, never absolute workspace paths or library files.
    for f in trace.user_frames:
        assert not f.file.startswith("/"), f
        assert "site-packages" not in f.file


def test_chain_relations_are_kept():
    _, cause = _load("chained_cause")
    assert [c.exc_type for c in cause.chain] == ["FileNotFoundError"]
    assert cause.chain[0].relation == "cause"
    assert cause.message == "config nope.yaml is missing"
    _, ctx = _load("chained_context")
    assert [c.exc_type for c in ctx.chain] == ["json.decoder.JSONDecodeError"]
    assert ctx.chain[0].relation == "context"


def test_dataloader_worker_traceback_is_unwrapped():
    _, trace = _load("dataloader_worker")
    assert trace.origin == "dataloader_worker"
    assert trace.wrapped_by == "ValueError" or trace.wrapped_by is not None
    assert trace.message == "bad sample 2"
    assert trace.user_frames[-1].function == "__getitem__"
    assert trace.user_frames[-1].source == 'raise ValueError(f"bad sample {i}")'


def test_subprocess_traceback_is_the_root_cause():
    _, trace = _load("subprocess_fail")
    assert trace.origin == "subprocess"
    assert trace.wrapped_by == "subprocess.CalledProcessError"
    assert trace.message == "math domain error"


def test_pytest_outcomes_from_junit_and_output():
    for case in ("test_pytest_fail", "test_pytest_fail_native"):
        _, trace = _load(case)
        outcomes = {t.nodeid.split("::")[-1]: t.outcome for t in trace.tests}
        assert outcomes == {"test_passes": "passed", "test_fails": "failed", "test_raises": "failed"}
        assert trace.message.startswith("x was 3")


def test_tpx_messages_name_the_op_and_tell_what_to_do():
    _, trace = _load("tpx_float64")
    assert "float32" in trace.message
    _, oom = _load("tpx_oom")
    assert "capacity" in oom.message
