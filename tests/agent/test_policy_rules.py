"""Offline fix rules: each turns a diagnosis into a concrete, parseable edit at the right site."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from agent.policy import Proposal, Verdict, propose
from agent.policy.base import Diagnosis, FixContext, UserFrame
from tools.parity.models import Divergence, ParityReport, TensorComparison


def _ctx(tmp_path: Path, files: dict[str, str], **kw) -> FixContext:
    for rel, text in files.items():
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text(text)
    return FixContext(source=tmp_path, known_files=sorted(files), **kw)


def _diag(kind: str, file: str, line: int, message: str = "", op: str | None = None, phase: str = "run") -> Diagnosis:
    return Diagnosis(phase=phase, kind=kind, op=op, exc_type="TypeError", message=message,
                     frames=[UserFrame(file="train.py", line=1, function="<module>"),
                             UserFrame(file=file, line=line, function="main")])


def _new_line(p: Proposal, rel: str, line: int) -> str:
    return p.files[rel].splitlines()[line - 1]


def test_float64_dtype_literal_becomes_float32(tmp_path):
    src = ("import torch\n\ndef main(device):\n    acc = torch.zeros((), dtype=torch.float64, device=device)\n"
           "    return acc\n")
    ctx = _ctx(tmp_path, {"m.py": src})
    p = propose(_diag("tpx_float64", "m.py", 4, "tpx has no float64"), ctx)
    assert isinstance(p, Proposal) and p.rule == "float64_to_float32" and p.kind == "policy"
    assert _new_line(p, "m.py", 4) == "    acc = torch.zeros((), dtype=torch.float32, device=device)"
    assert p.site == "m.py:4" and "-    acc" in p.diff and "+    acc" in p.diff
    assert p.dtype_changes == {"float64": "float32"}  # parity then compares at the float32 tier


def test_float64_double_call_and_host_transfer(tmp_path):
    src = ("import numpy as np\nimport torch\n\n\ndef main(device, y):\n"
           "    t = torch.from_numpy(y).to(device)\n    err = (t.double() - 1).abs()\n    return err\n")
    ctx = _ctx(tmp_path, {"m.py": src})
    p1 = propose(_diag("tpx_float64", "m.py", 7), ctx)
    assert _new_line(p1, "m.py", 7) == "    err = (t.float() - 1).abs()"
    p2 = propose(_diag("tpx_float64", "m.py", 6), ctx)
    assert _new_line(p2, "m.py", 6) == "    t = torch.from_numpy(y).to(device, dtype=torch.float32)"
    ast.parse(p2.files["m.py"])


def test_rule_does_not_repeat_a_site_it_tried(tmp_path):
    src = "import torch\nx = torch.ones(2, dtype=torch.double)\n"
    ctx = _ctx(tmp_path, {"m.py": src}, tried=["float64_to_float32@m.py:2"])
    d = Diagnosis(phase="run", kind="tpx_float64", frames=[UserFrame(file="m.py", line=2)])
    assert propose(d, ctx) is None


def test_mixed_devices_adds_the_device_to_the_factory(tmp_path):
    src = ("import torch\n\ndevice = torch.device('tpx')\n\n\ndef step(x):\n"
           "    mask = torch.ones(x.shape[0])\n    return x * mask\n")
    ctx = _ctx(tmp_path, {"m.py": src})
    p = propose(_diag("mixed_devices", "m.py", 8, "Expected all tensors to be on the same device"), ctx)
    assert isinstance(p, Proposal) and p.rule == "add_missing_device"
    assert _new_line(p, "m.py", 7) == "    mask = torch.ones(x.shape[0], device=device)"


def test_mixed_devices_without_device_variable_uses_the_other_operand(tmp_path):
    src = "import torch\n\n\ndef step(x):\n    return x + torch.arange(4)\n"
    ctx = _ctx(tmp_path, {"m.py": src})
    p = propose(_diag("mixed_devices", "m.py", 5), ctx)
    assert _new_line(p, "m.py", 5) == "    return x + torch.arange(4, device=x.device)"


def test_unsupported_op_gets_explicit_cpu_fallback(tmp_path):
    src = "import torch\n\n\ndef f(x, m):\n    idx = x.nonzero()\n    u = torch.unique(x)\n    return idx, u\n"
    ctx = _ctx(tmp_path, {"m.py": src})
    p = propose(_diag("unsupported_op", "m.py", 5, op="aten::nonzero"), ctx)
    assert _new_line(p, "m.py", 5) == "    idx = x.cpu().nonzero().to(x.device)"
    p2 = propose(_diag("unsupported_op", "m.py", 6, op="aten::unique"), ctx)
    assert _new_line(p2, "m.py", 6) == "    u = (torch.unique(x.cpu())).to(x.device)"


def test_unknown_unsupported_op_has_no_rule(tmp_path):
    ctx = _ctx(tmp_path, {"m.py": "import torch\ny = torch.fft.fft(x)\n"})
    assert propose(_diag("unsupported_op", "m.py", 2, op="aten::_fft_r2c"), ctx) is None


def _failed_parity(module: str | None, cause: str = "unknown", explanation: str = "") -> ParityReport:
    """A failed parity report whose first divergence (if any) is ``module``, blamed on ``cause``."""
    div = None
    if module is not None:
        out = TensorComparison(key=f"{module}#0:out", kind="module_output", verdict="fail", tier="tiered", reason="off")
        div = Divergence(key=f"{module}#0", module=module, inputs="pass", likely_cause=cause, explanation=explanation,
                         output=out)
    return ParityReport(verdict="fail", summary="parity FAIL", ref_dir="/r", target_dir="/t", counts={"fail": 1},
                        first_divergence=div, modules=[], tensors=[], scalars=[])


def test_parity_failure_sets_matmul_precision_at_entry(tmp_path):
    src = '"""doc"""\n\nimport argparse\n\nimport torch\n\n\ndef main():\n    pass\n'
    ctx = _ctx(tmp_path, {"train.py": src}, entry_file="train.py")
    d = Diagnosis(phase="parity", kind="parity_failed", parity=_failed_parity("net.0", "matmul_precision"))
    p = propose(d, ctx)
    assert isinstance(p, Proposal) and p.rule == "matmul_precision_highest"
    lines = p.files["train.py"].splitlines()
    assert lines[5] == 'if torch.accelerator.is_available() and torch.accelerator.current_accelerator().type == "tpx":'
    assert lines[6].startswith('    torch.set_float32_matmul_precision("highest")')
    assert lines[4] == "import torch"
    # applied once: a second parity failure finds it already there
    ctx2 = _ctx(tmp_path, {"train.py": p.files["train.py"]}, entry_file="train.py")
    assert propose(d, ctx2) is None


@pytest.mark.parametrize("cause", ["reduction_order", "computation", "dtype", "cpu_fallback"])
def test_parity_failure_blamed_on_something_else_is_not_matmul(tmp_path, cause):
    ctx = _ctx(tmp_path, {"train.py": "import torch\n"}, entry_file="train.py")
    # the explanation may well mention precision words: only the attributed cause counts
    d = Diagnosis(phase="parity", kind="parity_failed", parity=_failed_parity(
        "net.3", cause, "inputs agree; the output differs beyond float32 precision (bf16 linear?)"))
    assert propose(d, ctx) is None


def test_unlocalised_parity_failure_tries_matmul_precision_first(tmp_path):
    ctx = _ctx(tmp_path, {"train.py": "import torch\n"}, entry_file="train.py")
    d = Diagnosis(phase="parity", kind="parity_failed", parity=_failed_parity(None))
    p = propose(d, ctx)
    assert isinstance(p, Proposal) and p.rule == "matmul_precision_highest"


def test_oom_is_a_human_decision_with_figures(tmp_path):
    ctx = _ctx(tmp_path, {"m.py": "import torch\n"})
    msg = "tpx out of memory: requested 2.00 GiB, allocated 15.50 GiB, capacity 16.00 GiB"
    v = propose(_diag("tpx_oom", "m.py", 1, msg), ctx)
    assert isinstance(v, Verdict) and v.status == "needs_human"
    assert "requested 2.00 GiB" in v.summary and "capacity 16.00 GiB" in v.summary and "m.py:1" in v.summary


def test_verdicts_quote_the_first_line_of_the_message(tmp_path):
    ctx = _ctx(tmp_path, {"m.py": "import torch\n"})
    v = propose(_diag("missing_cuda_package", "m.py", 1, "No module named 'apex'\nTraceback follows"), ctx)
    assert isinstance(v, Verdict) and "m.py:1 (No module named 'apex')" in v.summary and "Traceback" not in v.summary
    v = propose(_diag("import_error", "m.py", 1, ""), ctx)  # no message: the summary still says where
    assert isinstance(v, Verdict) and v.rule == "environment_error" and v.summary.startswith("TypeError at m.py:1: ")
    v = propose(_diag("tpx_oom", "m.py", 1, "out of memory\nwhile allocating"), ctx)  # no figures: the first line
    assert isinstance(v, Verdict) and "m.py:1 (out of memory)" in v.summary


def test_unknown_signature_has_no_rule(tmp_path):
    ctx = _ctx(tmp_path, {"m.py": "import torch\n"})
    assert propose(_diag("other", "m.py", 1, "ValueError: boom"), ctx) is None


def test_backend_that_cannot_load_is_an_environment_failure(tmp_path):
    ctx = _ctx(tmp_path, {"m.py": "import torch\n"})
    msg = "tpx: could not build the C++ extension (needs a C++ compiler and ninja; set TPX_EXTENSION_DIR)"
    v = propose(_diag("other", "m.py", 1, msg), ctx)
    assert isinstance(v, Verdict) and v.status == "failed_sandbox" and "environment" in v.summary


@pytest.mark.parametrize(("src", "message", "expected", "kind"), [
    # the catalogue's automatic rewrite for .cuda(rank) (FRY055), with the module's device variable
    ("import torch\n\ndevice = torch.accelerator.current_accelerator(check_available=True) or torch.device('cpu')\n\n\n"
     "def main(local_rank):\n    model = torch.nn.Linear(2, 2).cuda(local_rank)\n    return model\n",
     "Invalid device, must be cuda device",
     "    model = torch.nn.Linear(2, 2).to(torch.device(device.type, local_rank))", "codemod"),
    # torch.cuda.Event: the device-generic table
    ("import torch\n\ndevice = torch.device('tpx')\n\n\ndef main():\n"
     "    start = torch.cuda.Event(enable_timing=True)\n    return start\n",
     "Tried to instantiate dummy base class Event", "    start = torch.Event(enable_timing=True, device=device)",
     "policy"),
], ids=["cuda_call", "cuda_event"])
def test_residual_cuda_at_the_failing_line_gets_a_review_rewrite(tmp_path, src, message, expected, kind):
    ctx = _ctx(tmp_path, {"m.py": src}, workspace=tmp_path)
    p = propose(_diag("other", "m.py", 7, message), ctx)
    assert isinstance(p, Proposal) and p.rule == "residual_cuda_codemod"
    assert p.kind == kind  # "policy": a review rewrite, not an automatic catalogue codemod
    assert _new_line(p, "m.py", 7) == expected


def test_other_failure_without_cuda_at_the_line_is_not_a_residual_cuda_call(tmp_path):
    ctx = _ctx(tmp_path, {"m.py": "import torch\nx = 1 / 0\n"}, workspace=tmp_path)
    assert propose(_diag("other", "m.py", 2, "ZeroDivisionError"), ctx) is None


def test_process_group_without_device_backend_gets_one_per_device(tmp_path):
    train = ("import torch\nimport torch.distributed as dist\n\ndevice = torch.device('tpx')\n\n\ndef setup():\n"
             "    dist.init_process_group("
             "backend=torch.distributed.Backend.default_device_backend_map.get(device.type, 'gloo'),"
             " init_method='file:///tmp/x', rank=0, world_size=1)\n")
    ctx = _ctx(tmp_path, {"train.py": train, "model.py": "import torch\n"})
    d = Diagnosis(phase="run", kind="other", exc_type="RuntimeError",
                  message="No backend type associated with device type tpx",
                  frames=[UserFrame(file="model.py", line=1)])
    p = propose(d, ctx)
    assert isinstance(p, Proposal) and p.rule == "per_device_process_group_backend" and p.site == "train.py:8"
    line = _new_line(p, "train.py", 8)
    assert ("backend=f\"cpu:gloo,{device.type}:"
            "{torch.distributed.Backend.default_device_backend_map.get(device.type, 'gloo')}\"") in line
    ns = {"device": type("D", (), {"type": "tpx"})(), "torch": __import__("torch")}
    # tpx registers its collective backend
    assert eval(line.split("backend=")[1].split(", init_method")[0], ns) == "cpu:gloo,tpx:tpxgloo"


def test_collectives_on_a_device_without_backend_need_a_human(tmp_path):
    ctx = _ctx(tmp_path, {"m.py": "import torch\n"})
    v = propose(_diag("other", "m.py", 1, "ProcessGroupGloo::allgather: unsupported device type tpx"), ctx)
    assert isinstance(v, Verdict) and v.status == "needs_human" and "register_backend" in v.summary


def test_residual_table_rewrites_every_call_of_that_api_in_the_file(tmp_path):
    src = ("import torch\n\ndevice = torch.device('tpx')\n\n\ndef main():\n"
           "    start = torch.cuda.Event(enable_timing=True)\n    end = torch.cuda.Event(enable_timing=True)\n"
           "    torch.cuda.synchronize()\n    return start, end\n")
    ctx = _ctx(tmp_path, {"m.py": src}, workspace=tmp_path)
    p = propose(_diag("other", "m.py", 7, "Tried to instantiate dummy base class Event"), ctx)
    lines = p.files["m.py"].splitlines()
    assert lines[6] == "    start = torch.Event(enable_timing=True, device=device)"
    assert lines[7] == "    end = torch.Event(enable_timing=True, device=device)"
    assert lines[8] == "    torch.cuda.synchronize()"  # another API: not this rule's edit


def test_residual_cuda_review_rewrite_takes_every_site_of_that_rule_in_the_file(tmp_path):
    """Two `.cuda(1)` calls (a literal ordinal other than 0 stays review in the catalogue): the one that
    failed and one later in the loop would fail the same way one target run later, so one proposal
    rewrites both (and nothing else)."""
    src = ("import torch\n\n"
           "device = torch.accelerator.current_accelerator(check_available=True) or torch.device('cpu')\n\n\n"
           "def main(local_rank):\n    model = torch.nn.Linear(2, 2).cuda(1)\n"
           "    for _ in range(2):\n        x = torch.randn(3, 2).cuda(1)\n        model(x)\n"
           "    y = torch.ones(2)  # not CUDA: untouched\n    return model, y\n")
    ctx = _ctx(tmp_path, {"m.py": src}, workspace=tmp_path)
    p = propose(_diag("other", "m.py", 7, "Invalid device, must be cuda device"), ctx)
    assert isinstance(p, Proposal) and p.rule == "residual_cuda_codemod" and p.kind == "policy"
    assert _new_line(p, "m.py", 7) == "    model = torch.nn.Linear(2, 2).to(device)"
    assert _new_line(p, "m.py", 9) == "        x = torch.randn(3, 2).to(device)"
    assert ".cuda(" not in p.files["m.py"]
    assert "1 more like it" in p.reason
    assert _new_line(p, "m.py", 11) == "    y = torch.ones(2)  # not CUDA: untouched"


def test_a_teardown_hang_is_never_migrated_and_names_the_stuck_site(tmp_path):
    ctx = _ctx(tmp_path, {"train.py": "import torch\n", "linger.py": "import time\n"})
    msg = "the run printed its output and then stopped making progress: rank 1 (pid 8) did not exit"
    v = propose(_diag("teardown_hang", "linger.py", 11, msg), ctx)
    assert isinstance(v, Verdict) and v.status == "needs_human" and v.rule == "teardown_hang_report"
    assert "printed its output" in v.summary and "rank 1 (pid 8)" in v.summary and "linger.py:11" in v.summary


def test_a_skipped_catalogue_rule_is_not_made_by_the_residual_cuda_fixer(tmp_path):
    """Issue 27: after `skip FRY013` the residual-CUDA fixer's device-generic equivalent of the very call FRY013
    rewrites is that rule's change by another road: not proposed; the migration stops saying why."""
    src = "import torch\n\ndevice = torch.device('tpx')\ntorch.cuda.synchronize()\nprint('done')\n"
    message = "AssertionError: Torch not compiled with CUDA enabled"
    made = propose(_diag("cuda_not_compiled", "m.py", 4, message), _ctx(tmp_path, {"m.py": src}, workspace=tmp_path))
    assert isinstance(made, Proposal) and "torch.cuda.synchronize()" not in made.files["m.py"]  # not skipped: made
    skipped = _ctx(tmp_path, {"m.py": src}, workspace=tmp_path, skip_rules=["FRY013"])
    v = propose(_diag("cuda_not_compiled", "m.py", 4, message), skipped)
    assert isinstance(v, Verdict) and v.status == "needs_human"
    assert "FRY013 at m.py:4" in v.summary and "asked to skip" in v.summary
    other = _ctx(tmp_path, {"m.py": src}, workspace=tmp_path, skip_rules=["FRY024"])  # another rule: no effect
    assert isinstance(propose(_diag("cuda_not_compiled", "m.py", 4, message), other), Proposal)


def test_a_fix_beside_a_skipped_rule_s_site_is_still_made(tmp_path):
    """Only a change of the skipped rule's own lines is its change: the float64 fix two lines below the
    torch.cuda.synchronize() FRY013 would rewrite is made."""
    src = ("import torch\n\ndevice = torch.device('tpx')\ntorch.cuda.synchronize()\n"
           "x = torch.ones(2, device=device).double()\n")
    ctx = _ctx(tmp_path, {"m.py": src}, workspace=tmp_path, skip_rules=["FRY013"])
    p = propose(_diag("tpx_float64", "m.py", 5, "tpx does not support torch.float64", op="aten::_to_copy"), ctx)
    assert isinstance(p, Proposal) and p.rule == "float64_to_float32", p
    assert "torch.cuda.synchronize()" in p.files["m.py"]
