"""The MCP tests' sample repository: a CUDA program and its CUDA test that migrate with codemods only."""

from __future__ import annotations

import os
from pathlib import Path

from service_client import PLAIN

TEST = '''import torch


def test_sum_on_the_gpu():
    x = torch.ones(3, device="cuda")
    assert float(x.sum()) == 3.0
'''


def write_sample(root: Path) -> Path:
    """A repository of a CUDA program and its CUDA test, readable by every user (the service copies only that)."""
    repo = root / "repo"
    (repo / "tests").mkdir(parents=True)
    (repo / "prog.py").write_text(PLAIN)
    (repo / "tests" / "test_prog.py").write_text(TEST)
    for path in (root, repo, repo / "tests"):
        os.chmod(path, 0o755)
    return repo
