"""Notebook cells: cell magics whose body is Python (``%%time``) are scanned and rewritten with the
magic line kept as written; other cell magics (``%%bash``, ``%%writefile``) are left unchanged and
reported; names an earlier cell imports mean what that import says in later cells."""

from __future__ import annotations

import json

import pytest

from tools.scan.api import rewrite, scan
from tools.scan.models import RewriteRequest, ScanRequest


def _cell(src: str) -> dict:
    return {"cell_type": "code", "metadata": {}, "execution_count": None, "outputs": [], "source": src}


def _notebook(tmp_path, *sources: str):
    nb = {"cells": [_cell(s) for s in sources], "metadata": {}, "nbformat": 4, "nbformat_minor": 5}
    (tmp_path / "nb.ipynb").write_text(json.dumps(nb, indent=1) + "\n", encoding="utf-8")


def _rewritten_cells(tmp_path) -> list[str]:
    (f,) = rewrite(RewriteRequest(path=tmp_path)).files
    return ["".join(c["source"]) for c in json.loads(f.rewritten)["cells"]]


SETUP = "import torch\ndevice = torch.device('cuda')\nmodel = torch.nn.Linear(2, 2).cuda()\n"


@pytest.mark.parametrize("magic", ["%%time\n", "%%timeit -n 3 -r 1  \n", "%%capture out\n"])
def test_a_timed_cell_is_rewritten_and_its_magic_line_kept_as_written(tmp_path, magic):
    body = "with torch.no_grad():\n    model(torch.ones(1, 2).cuda())\ntorch.cuda.synchronize()"
    _notebook(tmp_path, SETUP, magic + body)
    cells = _rewritten_cells(tmp_path)
    assert cells[1] == (magic + "with torch.no_grad():\n    model(torch.ones(1, 2).to(device))\n"
                        "torch.get_device_module(device).synchronize()")
    findings = [f for f in scan(ScanRequest(path=tmp_path)).findings if f.cell == 1]
    assert {(f.rule_id, f.line) for f in findings} == {("FRY002", 3), ("FRY013", 4)}  # lines of the cell


def test_the_magic_line_stays_first_when_the_rewrite_inserts_at_the_top_of_the_cell(tmp_path):
    # the first cell that needs a device variable gets its definition, at the top (no imports in it)
    _notebook(tmp_path, "import torch\n", "%%time\nx = torch.ones(2).cuda()\n")
    cells = _rewritten_cells(tmp_path)
    lines = cells[1].splitlines()
    assert lines[0] == "%%time"
    assert "x = torch.ones(2).to(device)" in lines
    assert any(line.startswith("device = torch.accelerator.current_accelerator") for line in lines)
    assert "#%%time" not in cells[1] and "import torch" not in cells[1]


@pytest.mark.parametrize("src", [
    "%%bash\nCUDA_VISIBLE_DEVICES=0 python -c 'import torch; torch.ones(1).cuda()'\n",
    "%%writefile train.py\nimport torch\nx = torch.ones(2).cuda()\n",
])
def test_cells_whose_magic_body_is_not_python_are_left_unchanged_and_reported(tmp_path, src):
    _notebook(tmp_path, "import torch\ny = torch.zeros(1).cuda()\n", src)
    result = rewrite(RewriteRequest(path=tmp_path))
    (f,) = result.files
    cells = ["".join(c["source"]) for c in json.loads(f.rewritten)["cells"]]
    assert cells[1] == src
    (note,) = [n for n in result.notes if n.kind == "skipped_notebook"]
    assert note.file == "nb.ipynb" and "cell 1" in note.message and "not Python" in note.message
    report = scan(ScanRequest(path=tmp_path))
    assert all(f.cell != 1 for f in report.findings)
    assert [n.kind for n in report.notes] == ["skipped_notebook"]


def test_a_cell_magic_cell_without_anything_cuda_like_is_not_reported(tmp_path):
    _notebook(tmp_path, "import torch\ny = torch.zeros(1).cuda()\n", "%%html\n<b>results</b>\n")
    assert scan(ScanRequest(path=tmp_path)).notes == []


@pytest.mark.parametrize("imports, use, rule", [
    ("import torch", "torch.cuda.synchronize()", "FRY013"),
    ("import torch as T", "T.cuda.is_available()", "FRY009"),
    ("from torch import cuda as tc", "tc.synchronize()", "FRY013"),
    ("from torch.cuda.amp import autocast", "with autocast():\n    pass", "FRY024"),
])
def test_names_imported_by_an_earlier_cell_resolve_in_later_cells(tmp_path, imports, use, rule):
    _notebook(tmp_path, imports + "\n", "x = 1\n", use + "\n")
    findings = scan(ScanRequest(path=tmp_path)).findings
    assert rule in {f.rule_id for f in findings if f.cell == 2}


def test_a_name_an_earlier_cell_imports_but_this_cell_rebinds_is_not_torch(tmp_path):
    _notebook(tmp_path, "import torch\n", "import mylib as torch\ntorch.cuda.synchronize()\n",
              "def f(torch):\n    torch.cuda.synchronize()\n")
    assert [f for f in scan(ScanRequest(path=tmp_path)).findings if f.cell in (1, 2)] == []


def test_a_later_cell_uses_the_earlier_torch_alias_and_imports_nothing(tmp_path):
    _notebook(tmp_path, "import torch as T\nx = T.ones(2).cuda()\n", "T.cuda.synchronize()\n")
    cells = _rewritten_cells(tmp_path)
    assert cells[1] == "T.get_device_module(device).synchronize()\n"
