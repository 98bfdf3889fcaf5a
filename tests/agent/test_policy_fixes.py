"""The offline policy edits code through tools.codemods.fixes: the codemods' factory table and
device-variable search, libcst positions. Each hostile case here was handled wrongly (or not at all)
by the line splicing the policy used before (agent/policy/edits.py with stdlib ast)."""

from __future__ import annotations

import ast
import shutil
from pathlib import Path

import pytest

from agent.migration.nodes.common import diagnosis_from_run
from agent.policy import Proposal, propose
from agent.policy.base import Diagnosis, FixContext, UserFrame
from tools.codemods.engine import analyze
from tools.codemods.tables import DEVICE_FACTORIES, TENSOR_FACTORIES
from tools.runner.api import run
from tools.runner.models import RunRequest

ROOT = Path(__file__).resolve().parents[2]
FIXTURE = Path(__file__).parent / "fixtures" / "zeros_like"


def _propose(tmp_path: Path, kind: str, src: str, line: int, op: str | None = None, **kw) -> Proposal | None:
    (tmp_path / "m.py").write_text(src)
    ctx = FixContext(source=tmp_path, known_files=["m.py"], **kw)
    result = propose(Diagnosis(phase="run", kind=kind, op=op, frames=[UserFrame(file="m.py", line=line)]), ctx)
    assert result is None or isinstance(result, Proposal)
    return result


def _line(p: Proposal, line: int) -> str:
    return p.files["m.py"].split("\n")[line - 1]


# --- one factory table: the policy's device rule and the codemods read the same names ----------

@pytest.mark.parametrize("qname", sorted(DEVICE_FACTORIES))
def test_the_device_rule_handles_every_factory_of_the_codemods_table(tmp_path, qname):
    src = f"import torch\n\ndevice = torch.device('tpx')\n\n\ndef f(x, a):\n    return x + {qname}(a)\n"
    p = _propose(tmp_path, "mixed_devices", src, 7)
    assert p is not None and p.rule == "add_missing_device"
    assert _line(p, 7) == f"    return x + {qname}(a, device=device)"


@pytest.mark.parametrize("qname", sorted(TENSOR_FACTORIES))
def test_the_per_step_transfer_codemod_reads_the_same_table(qname):
    src = ("import torch\n\nmodel = torch.nn.Linear(2, 1).cuda()\nopt = torch.optim.SGD(model.parameters(), lr=0.1)\n"
           f"for step in range(2):\n    batch = {qname}(a).cuda()\n    loss = model(batch).sum()\n    loss.backward()\n"
           "    opt.step()\n")
    assert "FRY051" in {f.rule_id for f in analyze(src, rewrite=False).findings}


def test_zeros_like_with_a_trailing_comma_gets_the_device(tmp_path):
    # zeros_like was only in the codemods' table: the policy's rule did not know it
    src = (FIXTURE / "train.py").read_text()
    p = _propose(tmp_path, "mixed_devices", src, 11)
    assert p is not None and _line(p, 11) == "    noisy = x + torch.zeros_like(base, device=device) + 0.5"


@pytest.mark.slow
def test_zeros_like_fixture_runs_on_tpx_after_the_policy_edit(tmp_path):
    """A real sandboxed tpx run fails with mixed devices at the zeros_like line; the policy's edit,
    applied, runs on tpx and prints what the program prints on CPU."""
    repo = tmp_path / "repo"
    shutil.copytree(FIXTURE, repo)

    def go(device: str, label: str):
        return run(RunRequest(path=repo, command="python train.py", device=device, timeout_s=120,
                              artifacts_dir=tmp_path / label))

    failed = go("tpx", "before")
    assert failed.status == "failed" and failed.trace is not None, failed.stderr_tail
    diag = diagnosis_from_run(failed, "run", ["train.py"])
    assert diag.kind == "mixed_devices" and diag.where() == "train.py:11"
    p = propose(diag, FixContext(source=repo, known_files=["train.py"], entry_file="train.py"))
    assert isinstance(p, Proposal) and p.rule == "add_missing_device" and p.site == "train.py:11"
    (repo / "train.py").write_text(p.files["train.py"])
    fixed, cpu = go("tpx", "after"), go("cpu", "cpu")
    assert fixed.status == "ok" and cpu.status == "ok", fixed.stderr_tail + cpu.stderr_tail
    assert "sum 18.0000" in cpu.stdout_tail and fixed.stdout_tail == cpu.stdout_tail


# --- cases the old line splicing got wrong ------------------------------------------------------

def test_device_keyword_before_a_comment_that_ends_the_line(tmp_path):
    src = ("import torch\n\ndevice = torch.device('tpx')\n\n\ndef f(x):\n    m = torch.ones(\n        3,  # rows\n"
           "    )\n    return x * m\n")
    p = _propose(tmp_path, "mixed_devices", src, 10)  # was None: ", device=device" went into the comment
    assert p is not None and p.files["m.py"].split("\n")[6:10] == [
        "    m = torch.ones(", "        3,  # rows", "        device=device,", "    )"]


def test_factory_inside_a_call_whose_first_line_failed(tmp_path):
    src = ("import torch\n\ndevice = torch.device('tpx')\n\n\ndef f(x):\n    return torch.cat(\n"
           "        [x, torch.zeros(3)],\n    )\n")
    p = _propose(tmp_path, "mixed_devices", src, 7)  # a traceback names the call's first line; was None
    assert p is not None and _line(p, 8) == "        [x, torch.zeros(3, device=device)],"


def test_other_operand_is_not_the_factory_size(tmp_path):
    src = "import torch\n\n\ndef f(n, x):\n    return torch.arange(n) + x\n"
    p = _propose(tmp_path, "mixed_devices", src, 5)
    assert p is not None and _line(p, 5) == "    return torch.arange(n, device=x.device) + x"  # was n.device


def test_host_fallback_parenthesises_expression_operands(tmp_path):
    src = "import torch\n\n\ndef f(a, b):\n    return torch.unique(a + b)\n"
    p = _propose(tmp_path, "unsupported_op", src, 5, op="aten::unique")
    assert p is not None and _line(p, 5) == "    return (torch.unique((a + b).cpu())).to((a + b).device)"


def test_host_fallback_through_a_torch_alias(tmp_path):
    src = "import torch as T\n\n\ndef f(a):\n    return T.unique(a)\n"
    p = _propose(tmp_path, "unsupported_op", src, 5, op="aten::unique")
    assert p is not None and _line(p, 5) == "    return (T.unique(a.cpu())).to(a.device)"  # was T.cpu().unique(a)


def test_float64_fix_keeps_strings_and_counts_lines_as_python_does(tmp_path):
    src = 'import torch\n\n\ndef f(x):\n    print("torch.float64", x.to(torch.float64).sum())\n'
    p = _propose(tmp_path, "tpx_float64", src, 5)
    assert p is not None and _line(p, 5) == '    print("torch.float64", x.to(torch.float32).sum())'
    src = "import torch\n\x0c\n\ndef f(x):\n    y = x.double()\n    return x.double()\n"
    p = _propose(tmp_path, "tpx_float64", src, 6)  # the old edit changed line 5
    assert p is not None and _line(p, 5) == "    y = x.double()" and _line(p, 6) == "    return x.float()"


def test_float64_fix_through_a_torch_alias(tmp_path):
    p = _propose(tmp_path, "tpx_float64", "import torch as T\n\n\ndef f(y):\n    return T.tensor(y)\n", 5)
    assert p is not None and _line(p, 5) == "    return T.tensor(y, dtype=T.float32)"  # was None


def test_matmul_precision_needs_torch_at_module_level(tmp_path):
    (tmp_path / "train.py").write_text("def main():\n    import torch\n    return torch.ones(1)\n")
    ctx = FixContext(source=tmp_path, known_files=["train.py"], entry_file="train.py")
    d = Diagnosis(phase="parity", kind="parity_failed", details={"parity": {"first_divergence": None}})
    assert propose(d, ctx) is None  # was a module-level torch.set_float32_matmul_precision: NameError


def test_no_stdlib_ast_splicing_is_left_in_the_policy():
    for path in sorted((ROOT / "agent" / "policy").glob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        imported = {a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
        imported |= {n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.module}
        assert "ast" not in imported, f"{path.name} imports ast"
