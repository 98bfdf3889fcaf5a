"""The runtime queries the codemods rewrite keep CUDA's meaning where no accelerator is, and ask tpx on tpx.

Each snippet is a CUDA program's runtime query (memory statistics, synchronize, device count/index/name,
events, streams). The original runs here on the CPU (no CUDA, tpx not loaded: what torch.cuda answers on a
machine without a GPU), the rewritten one on the CPU and on tpx, each side in one real subprocess. The
table is the contract docs/codemods.md ("Runtime queries without an accelerator") writes down.
"""

from __future__ import annotations

import functools
import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest

from tools.codemods.engine import analyze

_spec = importlib.util.spec_from_file_location("program_runs_q", Path(__file__).with_name("program_runs.py"))
program_runs = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(program_runs)  # type: ignore[union-attr]

RAISES = "raises"

# (snippet, what torch.cuda does without a GPU, what the rewrite does without an accelerator, on tpx);
# outcomes: RAISES or "ok <type> <value>" (value only where it is fixed); on tpx "ok <type>" (+ "> 0")
CASES: list[tuple[str, str, str, str]] = [
    ("result = torch.cuda.memory_allocated()", "ok int 0", "ok int 0", "ok int > 0"),
    ("result = torch.cuda.max_memory_allocated()", "ok int 0", "ok int 0", "ok int > 0"),
    ("result = torch.cuda.memory_reserved()", "ok int 0", "ok int 0", "ok int > 0"),
    ("result = torch.cuda.max_memory_reserved()", "ok int 0", "ok int 0", "ok int > 0"),
    ("result = torch.cuda.memory.max_memory_reserved(0)", "ok int 0", "ok int 0", "ok int > 0"),
    ("result = torch.cuda.max_memory_allocated() / 2**20", "ok float 0.0", "ok float 0.0", "ok float > 0"),
    ("result = torch.cuda.memory_stats()", "ok dict {}", "ok dict {}", "ok dict > 0"),
    ("result = torch.cuda.empty_cache()", "ok NoneType None", "ok NoneType None", "ok NoneType"),
    ("torch.cuda.empty_cache()", "ok NoneType None", "ok NoneType None", "ok NoneType"),
    ("result = torch.cuda.device_count()", "ok int 0", "ok int 0", "ok int > 0"),
    ("result = torch.cuda.is_available()", "ok bool False", "ok bool False", "ok bool > 0"),
    # torch.cuda raises without a GPU; there is nothing to reset or wait for: the rewrite does nothing
    # there (as the CUDA redirect's reference run does), so the migrated program still runs on the CPU
    ("torch.cuda.reset_peak_memory_stats()", RAISES, "ok NoneType None", "ok NoneType"),
    ("torch.cuda.reset_accumulated_memory_stats()", RAISES, "ok NoneType None", "ok NoneType"),
    ("torch.cuda.synchronize()", RAISES, "ok NoneType None", "ok NoneType"),
    ("torch.cuda.set_device(0)", RAISES, "ok NoneType None", "ok NoneType"),
    ("result = torch.cuda.Stream()", RAISES, "ok Stream", "ok Stream"),
    ("s = torch.cuda.Event(enable_timing=True)\ne = torch.cuda.Event(enable_timing=True)\ns.record()\n"
     "e.record()\ne.synchronize()\nresult = s.elapsed_time(e) >= 0", RAISES, "ok bool True", "ok bool > 0"),
    # questions with no answer without a device: they raise where CUDA's raise
    ("result = torch.cuda.mem_get_info()", RAISES, RAISES, "ok tuple"),
    ("result = torch.cuda.current_device()", RAISES, RAISES, "ok int"),
    ("result = torch.cuda.get_device_name()", RAISES, RAISES, "ok str"),
    ("result = torch.cuda.get_device_properties(0).total_memory", RAISES, RAISES, "ok int > 0"),
    ("with torch.cuda.device(0):\n    result = 1", RAISES, RAISES, "ok int > 0"),
]

# runs each program (argv[1]: a JSON list of sources) and prints one outcome per program
_DRIVER = """
import json, sys, torch
out = []
for src in json.load(open(sys.argv[1])):
    ns = {"__name__": "__main__"}
    try:
        exec(compile(src, "<case>", "exec"), ns)
    except Exception as exc:
        out.append(["raises", type(exc).__name__ + ": " + str(exc)[:200]])
        continue
    r = ns.get("result")
    kind = "dict" if isinstance(r, dict) else type(r).__name__
    positive = bool(r) if isinstance(r, (bool, dict)) else (isinstance(r, (int, float)) and r > 0)
    out.append(["ok", kind, repr(dict(r) if isinstance(r, dict) else r), positive])
print(json.dumps(out))
"""

# a tensor on the device, so that the memory counters have something to count where a device is
PRELUDE = ('import torch\n\ndevice = torch.device("cuda" if torch.cuda.is_available() else "cpu")\n'
           "keep = torch.ones(1024, device=device)\n")


@functools.cache
def _programs(rewrite: bool) -> tuple[str, ...]:
    sources = [PRELUDE + snippet + "\n" for snippet, *_ in CASES]
    if rewrite:
        sources = [analyze(src).new_source for src in sources]
    return tuple(sources)


def _outcomes(sources: tuple[str, ...], tmp: Path, *, tpx: bool) -> list[list[object]]:
    programs = tmp / f"programs-{tpx}-{abs(hash(sources))}.json"
    programs.write_text(json.dumps(list(sources)))
    res = subprocess.run([sys.executable, "-c", _DRIVER, str(programs)], capture_output=True, text=True,
                         timeout=300, cwd=tmp, env=program_runs.env_for(tpx))
    assert res.returncode == 0, res.stderr[-3000:]
    return json.loads(res.stdout.strip().splitlines()[-1])


def _shown(outcome: list[object], *, tpx: bool) -> str:
    if outcome[0] == RAISES:
        return RAISES
    _, kind, value, positive = outcome
    if tpx:
        return f"ok {kind}" + (" > 0" if positive else "")
    return f"ok {kind} {value}" if kind in ("int", "float", "dict", "NoneType", "bool") else f"ok {kind}"


@pytest.fixture(scope="module")
def work(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("queries")


def _case_id(case: tuple[str, str, str, str]) -> str:
    return case[0].splitlines()[0].removeprefix("result = ")


def test_every_rewrite_is_what_the_table_says():
    """The rewritten programs are the table's (guards included), and each is rewritten, not left for review."""
    for _src, new in zip(_programs(False), _programs(True), strict=True):
        assert "torch.cuda" not in new.replace("torch.cuda.is_available", ""), new
    memory = analyze(PRELUDE + "print(torch.cuda.max_memory_reserved() / 2**30)\n").new_source
    assert "print((torch.accelerator.max_memory_reserved() if torch.accelerator.is_available() else 0) / 2**30)" \
        in memory
    guarded = analyze(PRELUDE + "if torch.cuda.is_available():\n    torch.cuda.empty_cache()\n").new_source
    assert "if torch.accelerator.is_available():\n    torch.accelerator.empty_cache()\n" in guarded


def test_cuda_calls_without_a_gpu_answer_as_the_table_says(work):
    """The table's second column is measured: torch.cuda's own answers here (no CUDA, torch 2.13 CPU)."""
    got = [_shown(o, tpx=False) for o in _outcomes(_programs(False), work, tpx=False)]
    assert dict(zip(map(_case_id, CASES), got, strict=True)) == {_case_id(c): c[1] for c in CASES}


def test_rewrites_without_an_accelerator_keep_cudas_answer(work):
    outcomes = _outcomes(_programs(True), work, tpx=False)
    got = {_case_id(c): _shown(o, tpx=False) for c, o in zip(CASES, outcomes, strict=True)}
    assert got == {_case_id(c): c[2] for c in CASES}
    # where CUDA answers, the rewrite answers the same; where it raises, the rewrite raises or does nothing
    for case in CASES:
        assert case[2] == case[1] or case[1] == RAISES, case


def test_rewrites_on_tpx_ask_tpx(work):
    why = program_runs.tpx_missing()
    if why is not None:
        pytest.skip(why)
    outcomes = _outcomes(_programs(True), work, tpx=True)
    got = {_case_id(c): _shown(o, tpx=True) for c, o in zip(CASES, outcomes, strict=True)}
    assert got == {_case_id(c): c[3] for c in CASES}
