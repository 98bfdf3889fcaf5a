"""scan()/rewrite() contract: findings, aliases, diffs that git apply accepts, restrictions,
guarantees (formatting kept, idempotent, non-CUDA code untouched, unsafe sites left as review)."""

from __future__ import annotations

import subprocess
import textwrap
from pathlib import Path

import libcst as cst
import pytest

from tools.scan.api import ScanInputError, rewrite, scan
from tools.scan.models import RewriteRequest, ScanRequest

TRAIN = textwrap.dedent('''\
    """Training script."""
    import torch   # the framework
    import torch.nn as nn


    def plain(a, b):
        # nothing CUDA-specific here:   odd   spacing kept
        return  a+b   # trailing comment


    model = nn.Linear(2, 2).cuda()  # move it
    x = torch.ones(2,  2, device="cuda")
    y = x.cuda(1)   # another ordinal: review
    print(plain(1, 2), model(x).shape)
    ''')


def _write(tmp_path, name, text):
    p = tmp_path / name
    p.write_text(text, encoding="utf-8")
    return p


@pytest.mark.parametrize("header, use", [
    ("import torch as T", "T.cuda.is_available()"),
    ("from torch import cuda", "cuda.is_available()"),
    ("from torch.cuda import is_available as avail", "avail()"),
    ("import torch.cuda.amp as amp", "amp.autocast()"),
    ("from torch.cuda.amp import autocast", "autocast()"),
])
def test_names_resolve_through_imports_and_aliases(tmp_path, header, use):
    _write(tmp_path, "m.py", f"{header}\n{use}\n")
    ids = {f.rule_id for f in scan(ScanRequest(path=tmp_path)).findings}
    assert ids & {"FRY009", "FRY024"}


def test_same_names_not_from_torch_are_not_reported(tmp_path):
    _write(tmp_path, "m.py", "import mylib as cuda\ncuda.is_available()\ndef autocast():\n    pass\nautocast()\n")
    assert scan(ScanRequest(path=tmp_path)).findings == []


def test_rewrite_keeps_everything_outside_changed_nodes(tmp_path):
    _write(tmp_path, "train.py", TRAIN)
    result = rewrite(RewriteRequest(path=tmp_path))
    (f,) = result.files
    new = f.rewritten
    # every original line that holds no auto finding is still there, byte for byte
    for line in TRAIN.splitlines():
        if ".cuda()" not in line and '"cuda"' not in line:
            assert line in new.splitlines()
    assert "model = nn.Linear(2, 2).to(device)  # move it" in new
    assert 'x = torch.ones(2,  2, device=device)' in new
    assert "y = x.cuda(1)   # another ordinal: review" in new
    assert [r.rule_id for r in result.review] == ["FRY002"]
    assert result.review[0].category == "review"
    cst.parse_module(new)
    # the file on disk is untouched
    assert (tmp_path / "train.py").read_text(encoding="utf-8") == TRAIN


def test_second_rewrite_changes_nothing(tmp_path):
    p = _write(tmp_path, "train.py", TRAIN)
    first = rewrite(RewriteRequest(path=tmp_path))
    p.write_text(first.files[0].rewritten, encoding="utf-8")
    assert rewrite(RewriteRequest(path=tmp_path)).files == []


def test_non_cuda_files_are_never_touched(tmp_path):
    _write(tmp_path, "util.py", "import torch\n\ndef f(x):\n    return x.to(torch.float32).double()\n")
    _write(tmp_path, "train.py", TRAIN)
    result = rewrite(RewriteRequest(path=tmp_path))
    assert [f.file for f in result.files] == ["train.py"]


def test_diff_applies_with_git_apply(tmp_path):
    _write(tmp_path, "train.py", TRAIN)
    _write(tmp_path, "other.py", "import torch\nprint(torch.cuda.is_available())")  # no final newline
    subprocess.run(["git", "init", "-q", str(tmp_path)], check=True)
    result = rewrite(RewriteRequest(path=tmp_path))
    assert len(result.files) == 2
    patch = tmp_path / "ferry.patch"
    patch.write_text(result.diff, encoding="utf-8")
    subprocess.run(["git", "-C", str(tmp_path), "apply", "--check", str(patch)], check=True)
    subprocess.run(["git", "-C", str(tmp_path), "apply", str(patch)], check=True)
    for f in result.files:
        assert (tmp_path / f.file).read_text(encoding="utf-8") == f.rewritten


def test_rewrite_restricted_to_files_and_lines(tmp_path):
    _write(tmp_path, "train.py", TRAIN)
    _write(tmp_path, "b.py", "import torch\nx = torch.ones(1).cuda()\n")
    only_b = rewrite(RewriteRequest(path=tmp_path, files=["b.py"]))
    assert [f.file for f in only_b.files] == ["b.py"]
    line_of_model = TRAIN.splitlines().index("model = nn.Linear(2, 2).cuda()  # move it") + 1
    one_line = rewrite(RewriteRequest(path=tmp_path, lines={"train.py": [line_of_model]}))
    (f,) = one_line.files
    assert "nn.Linear(2, 2).to(device)" in f.rewritten
    assert 'device="cuda"' in f.rewritten  # the other line was not in the request


def test_device_tpx_pins_tpx(tmp_path):
    _write(tmp_path, "train.py", TRAIN)
    (f,) = rewrite(RewriteRequest(path=tmp_path, device="tpx")).files
    assert 'device = torch.device("tpx")' in f.rewritten
    assert "current_accelerator" not in f.rewritten


def test_existing_device_variable_is_reused(tmp_path):
    src = 'import torch\nDEV = torch.device("cuda")\nx = torch.ones(2).cuda()\ny = torch.zeros(1, device="cuda")\n'
    _write(tmp_path, "m.py", src)
    (f,) = rewrite(RewriteRequest(path=tmp_path)).files
    assert f.rewritten == ('import torch\nDEV = torch.accelerator.current_accelerator(check_available=True) '
                           'or torch.device("cpu")\nx = torch.ones(2).to(DEV)\ny = torch.zeros(1, device=DEV)\n')


def test_imports_made_unused_are_removed_and_others_kept(tmp_path):
    src = ("import os\nimport torch\nfrom torch.cuda.amp import autocast, GradScaler\n\n"
           "with autocast():\n    pass\nprint(os.sep, GradScaler)\n")
    _write(tmp_path, "m.py", src)
    (f,) = rewrite(RewriteRequest(path=tmp_path)).files
    assert "from torch.cuda.amp import GradScaler" in f.rewritten
    assert "import os" in f.rewritten
    assert "autocast," not in f.rewritten


def test_notebook_rewrite_keeps_magics(tmp_path):
    import json

    nb = {"cells": [{"cell_type": "code", "metadata": {}, "execution_count": None, "outputs": [],
                     "source": ["%time\n", "import torch\n", "x = torch.ones(2).cuda()"]}],
          "metadata": {}, "nbformat": 4, "nbformat_minor": 5}
    _write(tmp_path, "nb.ipynb", json.dumps(nb, indent=1) + "\n")
    (f,) = rewrite(RewriteRequest(path=tmp_path)).files
    cell = "".join(json.loads(f.rewritten)["cells"][0]["source"])
    assert cell.startswith("%time\nimport torch\n")
    assert "x = torch.ones(2).to(device)" in cell


def test_bad_requests(tmp_path):
    with pytest.raises(ScanInputError, match="does not exist"):
        scan(ScanRequest(path=tmp_path / "missing"))
    with pytest.raises(ScanInputError, match="unknown rule"):
        scan(ScanRequest(path=tmp_path, rules=["FRY999"]))
    _write(tmp_path, "a.txt", "cuda")
    with pytest.raises(ScanInputError, match=r"not a \.py"):
        scan(ScanRequest(path=tmp_path / "a.txt"))


def test_process_pool_gives_the_same_report(tmp_path):
    for i in range(20):
        _write(tmp_path, f"m{i:02d}.py", TRAIN)
    serial = scan(ScanRequest(path=tmp_path, jobs=1))
    pooled = scan(ScanRequest(path=tmp_path, jobs=2))
    assert serial.findings == pooled.findings
    assert serial.summary.findings == 60


def test_notebook_defines_the_device_once(tmp_path):
    import json

    def cell(src):
        return {"cell_type": "code", "metadata": {}, "execution_count": None, "outputs": [], "source": src}

    nb = {"cells": [cell("import torch\nx = torch.ones(2).cuda()\n"), cell("y = torch.zeros(1).cuda()\n")],
          "metadata": {}, "nbformat": 4, "nbformat_minor": 5}
    _write(tmp_path, "nb.ipynb", json.dumps(nb, indent=1) + "\n")
    (f,) = rewrite(RewriteRequest(path=tmp_path)).files
    cells = ["".join(c["source"]) for c in json.loads(f.rewritten)["cells"]]
    assert cells[0].count("device = torch.accelerator.current_accelerator") == 1
    assert cells[1] == "y = torch.zeros(1).to(device)\n"


@pytest.mark.parametrize("src", [
    "from torch.nn.parallel import DistributedDataParallel as W\nm = W(net, device_ids=[0])\n",
    "import torch.distributed as d\nd.barrier(device_ids=[0])\n",
    "from torch.cuda import synchronize as s\ns()\n",
    "from torch import device as D\nx = D('cuda')\n",
])
def test_aliased_imports_are_resolved(tmp_path, src):
    _write(tmp_path, "m.py", src)
    findings = scan(ScanRequest(path=tmp_path)).findings
    assert findings and findings[0].category == "auto"


def test_a_builtin_name_called_like_a_logger_in_a_training_loop_does_not_lose_the_file(tmp_path):
    """FRY050 asks whether ``NAME.info(...)`` is a logger by the assignments of NAME; a builtin's has no
    node, and the AttributeError made the whole file an internal error (no finding of it reported)."""
    _write(tmp_path, "train.py", textwrap.dedent('''\
        import torch

        model = torch.nn.Linear(2, 2).cuda()
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        for step in range(3):
            loss = model(torch.ones(2).cuda()).sum()
            loss.backward()
            opt.step()
            vars.info(f"loss {loss}")
        '''))
    report = scan(ScanRequest(path=tmp_path))
    assert report.notes == []
    assert [(f.rule_id, f.line) for f in report.findings if f.rule_id == "FRY002"] == [("FRY002", 3), ("FRY002", 6)]
    assert ("FRY050", 9) in {(f.rule_id, f.line) for f in report.findings}  # the f-string formats the tensor


def test_a_sort_key_with_a_string_prefix_keeps_its_prefix_and_quotes(tmp_path):
    """FRY042 took the literal's first character for its quote: u"cuda_time_total" became the name
    udevice_time_totalu (a NameError when the program runs)."""
    _write(tmp_path, "prof.py", textwrap.dedent('''\
        import torch

        with torch.profiler.profile() as prof:
            torch.ones(2).cuda()
        print(prof.key_averages().table(sort_by=u"cuda_time_total"))
        print(prof.key_averages().table(sort_by=r'self_cuda_time_total'))
        print(prof.key_averages().table(sort_by="cuda_time"))
        '''))
    (f,) = rewrite(RewriteRequest(path=tmp_path)).files
    lines = [line for line in f.rewritten.splitlines() if "sort_by" in line]
    assert lines == ['print(prof.key_averages().table(sort_by=u"device_time_total"))',
                          "print(prof.key_averages().table(sort_by=r'self_device_time_total'))",
                          'print(prof.key_averages().table(sort_by="device_time"))']


def test_clear_caches_forgets_parsed_modules_and_analyses(tmp_path: Path) -> None:
    """benchmarks/scan.py starts each run cold: nothing parsed or analysed by an earlier run is reused."""
    from tools.scan import analysis

    (tmp_path / "train.py").write_text("import torch\nx = torch.ones(2).cuda()\n", encoding="utf-8")
    analysis.process(analysis.FileJob(str(tmp_path), "train.py", 1_000_000))
    assert analysis._modules and analysis._outcomes
    analysis.clear_caches()
    assert not analysis._modules and not analysis._outcomes
