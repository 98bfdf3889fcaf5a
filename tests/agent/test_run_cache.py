"""One reference run per unchanged original (agent.migration.run_cache): a second migration of the same source,
command and settings takes the kept run instead of running the program again; a changed file, command or
variable runs it again; a kept entry that is not sound (a link in it, bad JSON, a path leading out) is
dropped and the run made again."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from agent.migration import early, run_cache
from agent.migration.facade import start
from agent.migration.nodes.reference import settle_reference
from agent.migration.runs import RunScheduler, finished
from agent.migration.state import MigrationOptions, dump
from tools.runner.models import RunResult

PROGRAM = """import torch
x = torch.arange(6, dtype=torch.float32, device="cuda").reshape(2, 3)
lin = torch.nn.Linear(3, 2).cuda()
print("out", lin(x).sum().item())
"""


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    src = tmp_path / "repo"
    src.mkdir()
    (src / "prog.py").write_text(PROGRAM)
    return src


def _opts(repo: Path, tmp_path: Path, command: str = "python prog.py", **kw: object) -> MigrationOptions:
    return MigrationOptions(source=str(repo), run_command=command, state_dir=str(tmp_path / "state"), **kw)


def _fake_run(adir: Path, status: str = "ok") -> RunResult:
    """A finished reference run's artifacts as the runner leaves them (no program run)."""
    probe = adir / "collected" / "probe"
    probe.mkdir(parents=True)
    (probe / "index.json").write_text('{"tensors": []}')
    (adir / "collected" / "redirect.jsonl").write_text("")
    (adir / "stdout.txt").write_text("out 1.0\n")
    run = RunResult(command=["/bin/sh", "-c", "python prog.py"], exit_code=0 if status == "ok" else 1, status=status,
                    duration_s=2.5, stdout_tail="out 1.0\n", stderr_tail="", isolation="bwrap", device="cpu",
                    redirect_cuda="cpu", probe_dir=probe, redirect_log_path=adir / "collected" / "redirect.jsonl",
                    artifacts_dir=adir)
    (adir / "result.json").write_text(run.model_dump_json())
    return run


def _kept(opts: MigrationOptions, tmp_path: Path, name: str = "first") -> str:
    key = run_cache.cache_key(opts, "reference")
    assert key is not None
    assert run_cache.store(opts.state_dir, key, "reference", _fake_run(tmp_path / name), "m-first")
    return key


def test_an_unchanged_original_gets_the_kept_reference_and_settles_it_as_reused(repo: Path, tmp_path: Path,
                                                                                  monkeypatch):
    monkeypatch.setenv("FERRY_PARALLEL_RUNS", "2")
    opts = _opts(repo, tmp_path)
    _kept(opts, tmp_path)
    runs = RunScheduler()
    assert not early.start_reference(runs, opts, "m-second")  # nothing started: the kept run is copied in
    assert not runs.has(early.reference_key("m-second"))
    adir = early.reference_artifacts(opts.state_dir, "m-second")
    run = finished(adir)
    assert run is not None and run.ok and run.duration_s == 2.5
    assert run.probe_dir == adir.resolve() / "collected" / "probe"
    assert (run.probe_dir / "index.json").read_text() == '{"tensors": []}'
    assert os.stat(run.probe_dir / "index.json").st_nlink == 1  # a copy: the dump readers refuse hard links
    update = settle_reference({"options": dump(opts), "migration_id": "m-second"}, run)  # type: ignore[typeddict-item]
    assert update["runs"][0]["reused"] is True and "reused" in update["_summary"] and "m-first" in update["_summary"]


@pytest.mark.parametrize("change", ["file", "new_file", "command", "env", "seed", "threads"])
def test_a_changed_file_command_or_setting_is_another_key(repo: Path, tmp_path: Path, change: str, monkeypatch):
    monkeypatch.setenv("FERRY_PARALLEL_RUNS", "1")
    opts = _opts(repo, tmp_path)
    key = run_cache.cache_key(opts, "reference")
    assert key is not None and run_cache.cache_key(_opts(repo, tmp_path), "reference") == key
    if change == "file":
        (repo / "prog.py").write_text(PROGRAM + "print('more')\n")
    elif change == "new_file":
        (repo / "data.txt").write_text("1 2 3\n")
    elif change == "command":
        opts = _opts(repo, tmp_path, "python prog.py --steps 2")
    elif change == "env":
        opts = _opts(repo, tmp_path, env={"MY_FLAG": "1"})
    elif change == "threads":  # the runs now compute on another number of threads
        monkeypatch.setattr("sandbox.hostmem.usable_cores", lambda: 64)
    else:
        opts = _opts(repo, tmp_path, seed=1)
    assert run_cache.cache_key(opts, "reference") != key
    assert run_cache.cache_key(opts, "golden") != run_cache.cache_key(opts, "reference")


def test_a_changed_source_finds_nothing_kept(repo: Path, tmp_path: Path):
    opts = _opts(repo, tmp_path)
    _kept(opts, tmp_path)
    (repo / "prog.py").write_text(PROGRAM.replace("(2, 3)", "(3, 2)"))
    adir = tmp_path / "state" / "artifacts" / "m-second" / "reference"
    assert early.kept_reference(opts, adir) is None and finished(adir) is None


def _entry(opts: MigrationOptions, key: str) -> Path:
    return run_cache.cache_root(opts.state_dir) / key


@pytest.mark.parametrize("tamper", ["symlink_file", "symlink_entry", "bad_json", "other_key", "path_out", "failed",
                                    "fifo"])
def test_a_tampered_kept_run_is_dropped_and_not_used(repo: Path, tmp_path: Path, tamper: str):
    opts = _opts(repo, tmp_path)
    key = _kept(opts, tmp_path)
    entry = _entry(opts, key)
    secret = tmp_path / "secret.txt"
    secret.write_text("not yours")
    meta = json.loads((entry / "entry.json").read_text())
    if tamper == "symlink_file":
        (entry / "collected" / "probe" / "index.json").unlink()
        (entry / "collected" / "probe" / "index.json").symlink_to(secret)
    elif tamper == "symlink_entry":
        other = tmp_path / "elsewhere"
        entry.rename(other)
        entry.symlink_to(other, target_is_directory=True)
    elif tamper == "bad_json":
        (entry / "entry.json").write_text("{not json")
    elif tamper == "other_key":
        (entry / "entry.json").write_text(json.dumps({**meta, "key": "0" * 40}))
    elif tamper == "path_out":
        (entry / "entry.json").write_text(json.dumps({**meta, "paths": {**meta["paths"],
                                                                        "redirect_log_path": "../../secret.txt"}}))
    elif tamper == "failed":
        (entry / "entry.json").write_text(json.dumps({**meta, "result": {**meta["result"], "status": "failed",
                                                                         "exit_code": 1}}))
    else:
        os.mkfifo(entry / "collected" / "pipe")
    adir = tmp_path / "state" / "artifacts" / "m-second" / "reference"
    assert early.kept_reference(opts, adir) is None
    assert finished(adir) is None  # nothing reads as finished: the reference runs again
    assert not os.path.lexists(entry)  # dropped (a link itself, never what it points to)
    assert secret.read_text() == "not yours"


def test_a_failed_or_kept_run_is_not_kept_again(repo: Path, tmp_path: Path):
    opts = _opts(repo, tmp_path)
    assert not early.keep_reference(opts, _fake_run(tmp_path / "bad", status="failed"), "m-bad")
    assert not run_cache.cache_root(opts.state_dir).exists() or not any(
        p for p in run_cache.cache_root(opts.state_dir).iterdir() if not p.name.startswith("."))
    _kept(opts, tmp_path)
    adir = tmp_path / "state" / "artifacts" / "m-second" / "reference"
    run = early.kept_reference(opts, adir)
    assert run is not None and run_cache.reused_from(adir) == "m-first"
    assert not early.keep_reference(opts, run, "m-second")


def test_a_second_migration_of_an_unchanged_repo_does_not_run_the_reference_again(repo: Path, tmp_path: Path,
                                                                                   monkeypatch):
    """End to end: the second ``ferry migrate``'s run log marks its reference run reused (not counted as run),
    and its verdict is the first's; a changed file makes the third run it again."""
    sdir = tmp_path / "state"

    def migrate(mid: str) -> dict:
        opts = MigrationOptions(source=str(repo), run_command="python prog.py", state_dir=str(sdir))
        snap = start(opts, migration_id=mid)
        assert snap.outputs is not None
        return json.loads(Path(snap.outputs.result).read_text())

    first = migrate("m-one")
    second = migrate("m-two")
    refs = [[r for r in res["run_log"] if r["kind"] == "reference"] for res in (first, second)]
    assert [r["reused"] for r in refs[0]] == [False]
    assert [r["reused"] for r in refs[1]] == [True] and refs[1][0]["duration_s"] == refs[0][0]["duration_s"]
    assert second["status"] == first["status"] and first["status"] in ("migrated", "partial")
    # every run made reports its start-up (copy, sandbox and interpreter, bootstrap) in the run log
    made = [r for r in first["run_log"] if not r["reused"]]
    assert made and all(r["startup"] and r["startup"]["first_line_s"] is not None for r in made), made
    step = next(s for s in second["steps"] if s["node"] == "reference_run")
    assert step["summary"].startswith("reused: the reference run of migration m-one")
    (repo / "prog.py").write_text(PROGRAM + "print('changed')\n")
    third = migrate("m-three")
    assert [r["reused"] for r in third["run_log"] if r["kind"] == "reference"] == [False]
