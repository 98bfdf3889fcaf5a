"""What a profiled run pays before the user's first line: dynamo's import (a second or two) only for a program
that compiles, and a start-up breakdown on every run (RunResult.startup: the copy, the sandbox and interpreter,
the bootstrap's parts)."""

from __future__ import annotations

import json
from pathlib import Path

from tools.profile.profile_doc import ProfileDoc
from tools.runner.api import run
from tools.runner.models import RunRequest

NO_COMPILE = """\
import sys
import torch

x = torch.ones(4, 4, device="tpx")
print("loss", (x @ x).sum().item())
print("dynamo imported:", "torch._dynamo" in sys.modules)
"""

COMPILES = """\
import torch


def step(x):
    y = x * 2
    print("inside")  # a graph break
    return y + 1


fast = torch.compile(step, backend="eager")
x = torch.ones(4, device="tpx")
for _ in range(2):
    out = fast(x)
print("loss", out.sum().item())
"""


def _run(tmp_path: Path, name: str, program: str, **kw: object):
    repo = tmp_path / name
    repo.mkdir()
    (repo / "prog.py").write_text(program)
    res = run(RunRequest(path=repo, command="python prog.py", device="tpx", redirect_cuda=None,
                         artifacts_dir=tmp_path / f"art-{name}", timeout_s=240, **kw))
    assert res.status == "ok", res.stderr_tail
    return res


def test_a_profiled_program_that_never_compiles_does_not_import_dynamo(tmp_path: Path) -> None:
    res = _run(tmp_path, "plain", NO_COMPILE, probe=True, profile=True)
    assert "dynamo imported: False" in res.stdout_tail


def test_a_program_that_compiles_still_gets_its_graph_breaks(tmp_path: Path) -> None:
    res = _run(tmp_path, "compiled", COMPILES, probe=False, profile=True)
    assert res.profile_dir is not None
    doc = ProfileDoc.model_validate_json((res.profile_dir / "profile.json").read_text())
    text = json.dumps(doc.model_dump(mode="json")["dynamo"])
    assert "graph_break" in text and "print" in text, text[:2000]


def test_every_run_reports_its_start_up_by_part(tmp_path: Path) -> None:
    res = _run(tmp_path, "startup", NO_COMPILE, probe=True, profile=True)
    s = res.startup
    assert s is not None and s.workspace_s >= 0
    assert s.launch_s is not None and s.bootstrap_s is not None and s.first_line_s is not None
    assert s.first_line_s >= s.bootstrap_s and s.first_line_s <= res.duration_s + s.workspace_s + 1
    assert s.hooks_s is not None and s.device_s is not None and s.device_s > 0  # tpx's extension was loaded
    assert s.hooks_s <= s.bootstrap_s


def test_a_forged_start_up_file_is_not_believed(tmp_path: Path) -> None:
    forge = ("import os\n"
             "open(os.environ['FERRY_STARTUP_FILE'], 'w').write('{\"start\": \"x\", \"ready\": 1e300, '\n"
             "                                                 '\"hooks_s\": -5, \"device_s\": 1e9}')\n")
    repo = tmp_path / "forge"
    repo.mkdir()
    (repo / "prog.py").write_text(forge)
    res = run(RunRequest(path=repo, command="python prog.py", device="cpu", artifacts_dir=tmp_path / "art-forge",
                         timeout_s=120, env={"FERRY_BOOTSTRAP": "0"}))
    assert res.status == "ok", res.stderr_tail
    s = res.startup
    assert s is not None and s.launch_s is None and s.bootstrap_s is None and s.first_line_s is None
    assert s.hooks_s is None and s.device_s is None
