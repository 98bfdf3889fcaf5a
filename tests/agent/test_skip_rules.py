"""--skip-rule / MigrationOptions.skip_rules: a rule the user left out edits nothing, the rest migrates."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from agent.migration import adapters
from agent.policy import Proposal, propose
from agent.policy.base import Diagnosis, FixContext, UserFrame
from agent.policy.catalogue import known_rules, unknown_rule_message

ROOT = Path(__file__).resolve().parents[2]

# .cuda() / device="cuda" (FRY001/2/4), a CUDA autocast region (FRY024), and a float64 metric (policy rule)
PROG = '''import torch

device = torch.device("cuda")


def main():
    x = torch.arange(6, dtype=torch.float32).cuda()
    w = torch.ones(6, device="cuda")
    for step in range(3):
        with torch.autocast("cuda", enabled=False):
            y = (x + step) * w
        total = y.double().sum()
        print(f"step {step} loss {total.item():.6f}")


if __name__ == "__main__":
    main()
'''
AUTOCAST_LINE = '        with torch.autocast("cuda", enabled=False):'


def _repo(tmp_path: Path) -> Path:
    repo = tmp_path / "repo"
    repo.mkdir()
    (repo / "prog.py").write_text(PROG)
    return repo


def _ferry(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "agent.cli", *args], cwd=ROOT, capture_output=True, text=True,
                          timeout=600)


def test_known_rules_hold_catalogue_and_policy_ids_with_descriptions():
    rules = known_rules()
    assert "autocast" in rules["FRY024"].lower() and "GradScaler" in rules["FRY025"]
    assert "float32" in rules["float64_to_float32"]
    assert all(rules.values()), [k for k, v in rules.items() if not v]
    assert unknown_rule_message("FRY024") is None
    assert "FRY024" in (unknown_rule_message("FRY24") or "")
    assert "float64_to_float32" in (unknown_rule_message("float64_to_flot32") or "")


def test_catalogue_rewrite_leaves_a_skipped_rules_sites(tmp_path):
    repo = _repo(tmp_path)
    full = adapters.rewrite(repo, device="accelerator").files[0]
    assert "FRY024" in full.applied_rules and AUTOCAST_LINE not in full.rewritten
    skipped = adapters.rewrite(repo, device="accelerator", skip_rules=["FRY024"]).files[0]
    assert "FRY024" not in skipped.applied_rules and AUTOCAST_LINE in skipped.rewritten
    assert ".cuda()" not in skipped.rewritten  # the other rules still ran


def test_policy_skips_a_rule_the_user_left_out(tmp_path):
    (tmp_path / "m.py").write_text("import torch\nx = torch.ones(2, dtype=torch.double)\n")
    diag = Diagnosis(phase="run", kind="tpx_float64", frames=[UserFrame(file="m.py", line=2)])
    ctx = FixContext(source=tmp_path, known_files=["m.py"])
    assert isinstance(propose(diag, ctx), Proposal)
    assert propose(diag, ctx.model_copy(update={"skip_rules": ["float64_to_float32"]})) is None


def test_unknown_skip_rule_is_a_usage_error_naming_close_ids(tmp_path):
    res = _ferry("migrate", str(_repo(tmp_path)), "--run", "python prog.py", "--skip-rule", "FRY24",
                 "--state-dir", str(tmp_path / "state"))
    assert res.returncode == 2, res.stderr
    assert "FRY24" in res.stderr and "FRY024" in res.stderr


@pytest.mark.slow
def test_migration_with_a_skipped_codemod_leaves_its_sites_and_migrates_the_rest(tmp_path):
    repo, out = _repo(tmp_path), tmp_path / "out"
    res = _ferry("migrate", str(repo), "--run", "python prog.py", "--skip-rule", "FRY024", "--json",
                 "--state-dir", str(tmp_path / "state"), "--out", str(out))
    assert res.returncode in (0, 1), res.stderr[-3000:]
    result = json.loads(res.stdout)
    assert "skipped by request: FRY024" in result["summary"]
    rules = [r for e in result["edits"] for r in e["rule"].split(",")]
    assert "FRY024" not in rules and "FRY002" in rules and "float64_to_float32" in rules
    patch = (out / "ferry.patch").read_text()
    assert "torch.autocast" not in "".join(ln for ln in patch.splitlines(True) if ln[:1] in "+-")
    assert "-    x = torch.arange(6, dtype=torch.float32).cuda()" in patch
    assert "+        total = y.float().sum()" in patch
    assert "rules skipped by request: `FRY024`" in (out / "report.md").read_text()
    assert (repo / "prog.py").read_text() == PROG
