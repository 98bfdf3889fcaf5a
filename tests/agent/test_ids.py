"""Ids are plain names: `ferry migrate --id`, `ferry resume ID`, the service's session ids and the paths made
from them never leave the state directory, and a bad one is exit 2 / 404 with a message, not a traceback."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
BAD = ["../../X/outside", "/tmp/abs-id", "a/b", "..", "-rf", "x" * 5000, "a\nb", ""]


def _ferry(*args: str, cwd: Path = ROOT) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "agent.cli", *args], cwd=cwd, capture_output=True, text=True,
                          timeout=120, env={**os.environ, "PYTHONPATH": str(ROOT)})


def _files(root: Path) -> set[Path]:
    return {p for p in root.rglob("*")} if root.exists() else set()


@pytest.mark.parametrize("bad", ["x" * 5000, "../../X/outside", "ABS", "a/b"])
def test_migrate_refuses_an_id_that_is_not_a_plain_name(tmp_path, bad):
    bad = str(tmp_path / "abs-id") if bad == "ABS" else bad
    repo = tmp_path / "work" / "repo"
    repo.mkdir(parents=True)
    (repo / "prog.py").write_text("print('hi')\n")
    state = tmp_path / "work" / "state"
    before = _files(tmp_path)
    r = _ferry("migrate", str(repo), "--run", "python prog.py", "--state-dir", str(state), "--id", bad,
               "--offline", "--json")
    assert r.returncode == 2, r.stderr[-3000:]
    assert "--id" in r.stderr and "plain name" in r.stderr and "Traceback" not in r.stderr
    assert len(r.stderr) < 2000  # a 5000-character id is not echoed whole
    after = _files(tmp_path) - before
    assert all(state in p.parents or p == state for p in after), sorted(after)  # nothing outside --state-dir
    assert not (tmp_path / "X").exists() and not (tmp_path / "abs-id").exists()


def test_resume_refuses_an_id_that_is_not_a_plain_name(tmp_path):
    for bad in ("../../X/outside", "a/b", "x" * 5000):
        r = _ferry("resume", bad, "--state-dir", str(tmp_path / "state"))
        assert r.returncode == 2 and "plain name" in r.stderr and "Traceback" not in r.stderr, r.stderr[-2000:]


def test_the_validator_and_the_paths_made_from_ids():
    from agent.ids import InvalidId, check_id, id_problem
    from agent.migration.paths import artifacts_root, workspaces_root

    for good in ("m20250101-120000-abc123", "s1", "eval-mlp_training", "a.b", "9" * 128,
                 "3f1c2a6e-1b2c-4d5e-8f90-a1b2c3d4e5f6"):
        assert id_problem(good) is None and check_id(good) == good
    for bad in [*BAD, "9" * 129, "a..b", ".hidden", "a b", "é"]:
        assert id_problem(bad) is not None
        with pytest.raises(InvalidId, match="plain name"):
            check_id(bad)
    with pytest.raises(InvalidId):
        workspaces_root("/srv/state", "../../etc")
    with pytest.raises(InvalidId):
        artifacts_root("/srv/state", "a/b")
    assert artifacts_root("/srv/state", "m1") == Path("/srv/state/artifacts/m1")


def test_inside_refuses_a_link_that_leads_out(tmp_path):
    from agent.ids import InvalidId, inside

    (tmp_path / "root").mkdir()
    (tmp_path / "elsewhere").mkdir()
    (tmp_path / "root" / "planted").symlink_to(tmp_path / "elsewhere")
    assert inside(tmp_path / "root", "fine") == tmp_path / "root" / "fine"
    with pytest.raises(InvalidId, match="leads outside"):
        inside(tmp_path / "root", "planted")


def test_the_migration_api_refuses_a_bad_id(tmp_path):
    from agent.ids import InvalidId
    from agent.migration.facade import load, resume

    with pytest.raises(InvalidId):
        resume("../x", tmp_path)
    with pytest.raises(InvalidId):
        load("a/b", tmp_path)
