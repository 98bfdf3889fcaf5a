"""Text a run chose (its exception message) reaches report.md, the terminal and result.json; in the
first two it is escaped: no HTML, no table breaks, no terminal escape sequences, no rich markup."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
HOSTILE = "boom [bold red]x[/bold red] <script>alert(1)</script> a|b \x1b]52;c;cHduZWQ=\x07 \x1b[2J end"

PROG = f'''import torch

x = torch.ones(2).cuda()
raise RuntimeError({HOSTILE!r})
'''


def test_a_runs_message_is_escaped_in_the_report_and_on_the_terminal(tmp_path):
    repo = tmp_path / "repo"
    repo.mkdir()
    (repo / "prog.py").write_text(PROG)
    proc = subprocess.run([sys.executable, "-m", "agent.cli", "migrate", str(repo), "--run", "python prog.py",
                           "--state-dir", str(tmp_path / "state"), "--out", str(tmp_path / "out")],
                          cwd=ROOT, capture_output=True, text=True, timeout=600,
                          env={**os.environ, "COLUMNS": "400"})
    assert proc.returncode == 1, proc.stderr[-3000:]
    result = json.loads((tmp_path / "out" / "result.json").read_text())
    assert result["status"] == "needs_human" and "<script>" in result["summary"]  # JSON keeps the text as is

    report = (tmp_path / "out" / "report.md").read_text()
    # outside code blocks (the diff shows the program's own source, literally)
    report = re.sub(r"^(`{3,})diff\n.*?^\1$", "", report, flags=re.S | re.M)
    assert "boom" in report
    assert "<script>" not in report and "\x1b" not in report and "\x07" not in report
    assert r"\<script\>" in report and r"a\|b" in report  # shown literally, not as HTML or a table break

    terminal = proc.stdout + proc.stderr
    assert "boom" in terminal
    assert "\x1b]52" not in terminal and "\x1b[2J" not in terminal and "\x07" not in terminal
    assert "[bold red]x[/bold red]" in terminal  # printed as text, not taken as rich markup
