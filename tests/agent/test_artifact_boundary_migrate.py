"""`ferry migrate` of a tiny CUDA repo whose program and tests plant links beside every artifact of
every run (junit XML, redirect log, a probe chunk, profile JSON/trace/markdown), pointing at
root-only host files and at a host path that must not be created: the migration reads and writes
none of them, names the refusals in its runs, and still migrates on what Ferry itself wrote (the
probe dumps). A run that plants links in the probe dump itself ends `partial` (see
tests/runner/test_artifact_boundary.py for each file and directory)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from agent.migration.facade import load

ROOT = Path(__file__).resolve().parents[2]
SECRET = "root-only-secret-c05a"

PROG = '''import os, re

import torch

SECRET_XML, SECRET_JSON, ABSENT = {paths!r}
PLANT_INDEX = {plant_index!r}


class Scale(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.w = torch.nn.Parameter(torch.full((4,), 0.5))

    def forward(self, x):
        return x * self.w + 1


def link(path, target):
    if os.path.lexists(path):
        os.unlink(path)
    os.symlink(target, path)


model = Scale().cuda()
x = torch.ones(3, 4).cuda()
for step in range(3):  # the third call ends the probed steps: the probe writes its dump then
    print(f"step {{step}} loss {{float(model(x).sum()):.4f}}", flush=True)
probe, profile = os.environ.get("FERRY_PROBE_DIR"), os.environ.get("FERRY_PROFILE_DIR")
junit = re.search(r"--junit-xml=(\\S+)", os.environ["PYTEST_ADDOPTS"]).group(1)
link(junit, SECRET_XML)
if os.environ.get("FERRY_REDIRECT_LOG"):
    link(os.environ["FERRY_REDIRECT_LOG"], SECRET_XML)
if probe:
    link(os.path.join(probe, "chunk_99999.pt"), SECRET_XML)
    if PLANT_INDEX:
        link(os.path.join(probe, "index.json"), SECRET_JSON)
if profile:
    link(os.path.join(profile, "profile.json"), SECRET_JSON)
    link(os.path.join(profile, "trace.json"), SECRET_XML)
    link(os.path.join(profile, "profile.md"), ABSENT)
os._exit(0)  # skip the profiler's exit hook, which would replace profile.json
'''

TESTS = '''import atexit, os, re


def _plant():  # after pytest wrote its junit XML
    junit = re.search(r"--junit-xml=(\\S+)", os.environ["PYTEST_ADDOPTS"]).group(1)
    if os.path.lexists(junit):
        os.unlink(junit)
    os.symlink({xml!r}, junit)


atexit.register(_plant)


def test_ok():
    assert True
'''


def _migrate(tmp_path: Path, plant_index: bool) -> tuple[dict, dict, subprocess.CompletedProcess, dict]:
    """Run the migration; returns (result.json, state, the process, refusals by run kind) after checking
    that no host file changed, the absent path was not created and SECRET is nowhere."""
    host = tmp_path / "host"
    host.mkdir()
    xml, js, absent = host / "secret.xml", host / "secret.json", tmp_path / "created-by-host.md"
    xml.write_text(f'<testsuite><testcase classname="t" name="{SECRET}"><failure message="{SECRET}"/></testcase>'
                   "</testsuite>")
    js.write_text(json.dumps({"format": "ferry-probe/1", "meta": {"closed": True}, "events": [],
                              "scalars": {SECRET: [1.0]}, "window": {"steps": 1}}))
    for p in (xml, js):
        p.chmod(0o600)
    before = {p: (p.stat().st_mtime_ns, p.read_bytes()) for p in (xml, js)}
    repo = tmp_path / "repo"
    (repo / "tests").mkdir(parents=True)
    (repo / "prog.py").write_text(PROG.format(paths=(str(xml), str(js), str(absent)), plant_index=plant_index))
    (repo / "tests" / "test_a.py").write_text(TESTS.format(xml=str(xml)))
    sdir, out = tmp_path / "state", tmp_path / "out"
    res = subprocess.run([sys.executable, "-m", "agent.cli", "migrate", str(repo), "--run", "python prog.py",
                          "--test", "python -m pytest -q tests", "--json", "--state-dir", str(sdir), "--id", "plant",
                          "--out", str(out), "--max-iterations", "2"],
                         cwd=ROOT, capture_output=True, text=True, timeout=600)
    result = json.loads(res.stdout)
    state = load("plant", sdir)
    refused: dict[str, set[str]] = {}
    for r in state.runs:
        refused.setdefault(r.kind, set()).update(f"{a.path}: {a.reason}" for a in r.artifacts_refused)
    assert {p: (p.stat().st_mtime_ns, p.read_bytes()) for p in (xml, js)} == before and not absent.exists()
    assert SECRET not in res.stdout and SECRET not in res.stderr
    for p in [*sdir.rglob("*"), *out.rglob("*")]:
        if p.is_file() and not p.is_symlink():
            assert SECRET.encode() not in p.read_bytes(), p
    return result, state, res, refused


def test_a_migration_reads_nothing_its_runs_planted(tmp_path: Path):
    result, state, res, refused = _migrate(tmp_path, plant_index=False)
    # Everything verified passes, but the target run's profile.json was a planted link (refused):
    # without the run's own op counts there is no evidence of device work, so it is not migrated.
    assert result["status"] == "partial", (result.get("summary"), res.stderr[-3000:])
    assert result["summary"].startswith("runs on tpx, tests pass (not counted: the test command wrote no pytest "
                                        "report) and parity passes, but there is no evidence "
                                        "that the target run executed its work on tpx"), result["summary"]
    assert "holds no profile.json" in result["summary"] and result["device_work"] is None
    assert set(refused) >= {"reference", "target", "tests", "profile"}, state.runs
    assert {"junit.xml: symlink", "redirect.jsonl: symlink", "probe/chunk_99999.pt: symlink"} <= refused["reference"]
    assert {"junit.xml: symlink", "probe/chunk_99999.pt: symlink", "profile/profile.json: symlink",
            "profile/trace.json: symlink", "profile/profile.md: symlink"} <= refused["target"]
    assert refused["tests"] == {"junit.xml: symlink"}
    assert {"profile/profile.json: symlink", "profile/profile.md: symlink"} <= refused["profile"]
    assert state.parity is not None and state.parity.verdict == "pass"  # the probe dumps were Ferry's, compared
    assert state.profile is None and "holds no profile.json" in (state.profile_error or "")


def test_a_planted_probe_index_ends_the_migration_partial_not_failed_internal(tmp_path: Path):
    result, state, res, refused = _migrate(tmp_path, plant_index=True)
    assert result["status"] == "partial", (result.get("summary"), res.stderr[-3000:])
    assert "parity cannot be proven" in result["summary"] and "artifacts_refused" in result["summary"]
    assert "probe/index.json: symlink" in refused["reference"]
    # on tpx: the target run refused its planted index too, or the only tpx run was an evidence run the probe
    # ended after its recorded steps, before the program planted anything (docs/parity.md)
    if "target" in refused:
        assert "probe/index.json: symlink" in refused["target"]
    else:
        assert [r.status for r in state.runs if r.kind == "evidence"] == ["ended"] and not refused["evidence"]
