"""The skill bundle (integrations/skill): its scripts migrate a sample through `ferry ... --json`, and
verdict.py passes only a result Ferry called migrated with tests and parity passed."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SKILL = ROOT / "integrations" / "skill"
FERRY = Path(sys.executable).parent / "ferry"
pytestmark = pytest.mark.timeout(600)


def _verdict(path: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, str(SKILL / "scripts" / "verdict.py"), str(path)],
                          capture_output=True, text=True, timeout=30)


def test_the_skill_names_only_scripts_it_ships():
    text = (SKILL / "SKILL.md").read_text()
    front = re.match(r"---\nname: (\S+)\ndescription: (.+?)\n---\n", text, re.S)
    assert front and front.group(1) == "ferry-migrate" and len(front.group(2)) > 80
    named = set(re.findall(r"`scripts/([\w.]+)", text))
    assert named == {p.name for p in (SKILL / "scripts").iterdir()}
    assert all(os.access(SKILL / "scripts" / n, os.X_OK) for n in named)


def test_scripts_migrate_a_sample_and_the_verdict_follows_the_result(tmp_path, sample):
    env = {**os.environ, "FERRY": str(FERRY)}
    done = subprocess.run([str(SKILL / "scripts" / "migrate.sh"), str(sample), "python prog.py",
                           "python -m pytest -q tests"], cwd=tmp_path, env=env, capture_output=True, text=True,
                          timeout=500)
    assert done.returncode == 0, done.stderr[-3000:]
    result = tmp_path / "ferry-out" / "result.json"
    assert json.loads(done.stdout)["status"] == json.loads(result.read_text())["status"] == "migrated"
    ok = _verdict(result)
    assert ok.returncode == 0 and "the tests passed and parity passed" in ok.stdout

    record = json.loads(result.read_text())
    record["parity"]["passed"] = False
    (tmp_path / "parity.json").write_text(json.dumps(record))
    assert _verdict(tmp_path / "parity.json").returncode == 1
    record = json.loads(result.read_text())
    record["run_log"] = [r for r in record["run_log"] if r["kind"] != "tests"]
    (tmp_path / "notests.json").write_text(json.dumps(record))
    no_tests = _verdict(tmp_path / "notests.json")
    assert no_tests.returncode == 1 and "tests did not pass" in no_tests.stdout
    (tmp_path / "other.json").write_text('{"findings": []}')
    assert _verdict(tmp_path / "other.json").returncode == 2

    scan = subprocess.run([str(SKILL / "scripts" / "scan.sh"), str(sample)], env=env, capture_output=True,
                          text=True, timeout=120)
    assert scan.returncode == 0 and {f["rule_id"] for f in json.loads(scan.stdout)["findings"]} >= {"FRY001"}
