"""End to end: a sandboxed program plants links (and a FIFO, a huge sparse file) in every artifact file
and directory it can reach, pointing at host files it must not read and host paths it must not
create. Under `ferry run` (tools.runner.api.run) and `ferry check` (tools.parity.check) the host
reads none of it, writes through none of it, and the result names what it refused and why."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tools.parity.check import check, result_text
from tools.parity.models import CheckRequest
from tools.probe.dump import DumpError, ProbeDump
from tools.profile.report import ProfileError, build_profile_report
from tools.runner.api import run
from tools.runner.models import RunRequest

SECRET = "root-only-secret-7d3e"

# Plants links where Ferry's own files go, then exits without running the probe's/profiler's exit
# hooks (which would replace them). argv: mode, then host paths the program cannot see (bwrap).
PLANT = r'''
import os, re, shutil, sys

mode, secret_xml, secret_json, absent, host_dir = sys.argv[1:6]
probe = os.environ.get("FERRY_PROBE_DIR")
profile = os.environ.get("FERRY_PROFILE_DIR")
log = os.environ.get("FERRY_REDIRECT_LOG")
junit = re.search(r"--junit-xml=(\S+)", os.environ["PYTEST_ADDOPTS"]).group(1)


def link(path, target):
    if os.path.lexists(path):
        shutil.rmtree(path) if os.path.isdir(path) and not os.path.islink(path) else os.unlink(path)
    os.symlink(target, path)


if mode == "files":
    link(junit, secret_xml)  # the attacker's report: root-only junit XML parsed into the result
    if log:
        link(log, secret_xml)
    if probe:
        link(os.path.join(probe, "index.json"), secret_json)
        link(os.path.join(probe, "chunk_00000.pt"), secret_xml)
    if profile:
        link(os.path.join(profile, "profile.json"), secret_json)
        link(os.path.join(profile, "trace.json"), secret_xml)
        link(os.path.join(profile, "profile.md"), sys.argv[6] if len(sys.argv) > 6 else absent)
else:  # the directories themselves, a FIFO, a 1 GiB sparse file
    if probe:
        link(probe, host_dir)
    if profile:
        link(profile, absent + ".d")
    os.mkfifo(junit)
    if log:
        with open(log, "wb") as fh:
            fh.truncate(1 << 30)
print("planted", mode, flush=True)
os._exit(0)
'''


@pytest.fixture
def host(tmp_path: Path) -> dict[str, Path]:
    """Root-only host files the run must not get read (a junit XML and a profile/probe JSON naming
    SECRET), a host dir holding a valid-looking probe dump, and paths that must not be created."""
    d = tmp_path / "host"
    d.mkdir()
    xml = d / "secret.xml"
    xml.write_text(f'<testsuite><testcase classname="t" name="{SECRET}"><failure message="{SECRET}"/></testcase>'
                   "</testsuite>")
    js = d / "secret.json"
    js.write_text(json.dumps({"format": "ferry-probe/1", "meta": {"closed": True}, "events": [],
                              "scalars": {SECRET: [1.0]}, "ops": [{"op": SECRET, "count": 1, "self_cpu_us": 1.0}],
                              "window": {"steps": 1}, "trace": "../secret.xml"}))
    (d / "index.json").write_text(js.read_text())
    for p in (xml, js, d / "index.json"):
        p.chmod(0o600)
    return {"xml": xml, "json": js, "dir": d, "absent": tmp_path / "created-by-host.md"}


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    src = tmp_path / "repo"
    src.mkdir()
    (src / "plant.py").write_text(PLANT)
    return src


def _snapshot(d: Path) -> dict[str, tuple[int, bytes]]:
    return {p.name: (p.stat().st_mtime_ns, p.read_bytes()) for p in sorted(d.iterdir())}


def _no_secret_anywhere(root: Path, *texts: str) -> None:
    for text in texts:
        assert SECRET not in text
    for p in root.rglob("*"):
        if p.is_file() and not p.is_symlink() and "host" not in p.relative_to(root).parts:
            assert SECRET.encode() not in p.read_bytes(), p


def _command(mode: str, host: dict[str, Path], *extra: Path) -> str:
    args = [host["xml"], host["json"], host["absent"], host["dir"], *extra]
    return f"python plant.py {mode} " + " ".join(str(a) for a in args)


def _refused(res) -> dict[str, str]:
    return {r.path: r.reason for r in res.artifacts_refused}


def test_links_in_every_artifact_file_are_refused_under_ferry_run(repo: Path, tmp_path: Path, host):
    before = _snapshot(host["dir"])
    art = tmp_path / "art"
    res = run(RunRequest(path=repo, command=_command("files", host), device="cpu", redirect_cuda="cpu", probe=True,
                         profile=True, timeout_s=120, artifacts_dir=art))
    assert res.status == "ok" and "planted files" in res.stdout_tail, res.stderr_tail
    assert _refused(res) == {name: "symlink" for name in (
        "junit.xml", "redirect.jsonl", "probe/index.json", "probe/chunk_00000.pt", "profile/profile.json",
        "profile/trace.json", "profile/profile.md")}
    assert res.junit_xml is None and res.redirect_log_path is None and res.trace is None
    assert not (art / "child").exists()  # the run's own dir is gone; the result points into the host copy
    assert res.probe_dir == art / "collected" / "probe" and res.profile_dir == art / "collected" / "profile"
    # every reader the check and the migration use, on what the result hands them
    with pytest.raises(DumpError, match="not a probe dump"):
        ProbeDump(res.probe_dir)
    with pytest.raises(ProfileError, match=r"holds no profile\.json"):
        build_profile_report(res.profile_dir, repo)
    assert _snapshot(host["dir"]) == before and not host["absent"].exists()
    _no_secret_anywhere(tmp_path, res.model_dump_json())
    saved = json.loads((art / "result.json").read_text())
    assert {r["path"] for r in saved["artifacts_refused"]} == set(_refused(res))


def test_swapped_directories_a_fifo_and_a_sparse_file_are_refused_under_ferry_run(repo: Path, tmp_path: Path, host):
    before = _snapshot(host["dir"])
    res = run(RunRequest(path=repo, command=_command("dirs", host), device="cpu", redirect_cuda="cpu", probe=True,
                         profile=True, timeout_s=120, artifacts_dir=tmp_path / "art"))
    assert res.status == "ok" and "planted dirs" in res.stdout_tail, res.stderr_tail
    refused = _refused(res)
    assert {k: refused[k] for k in ("probe", "profile", "junit.xml")} == {
        "probe": "symlink", "profile": "symlink", "junit.xml": "not a regular file (fifo)"}
    assert refused["redirect.jsonl"].startswith("too large: 1073741824 bytes > cap")
    with pytest.raises(DumpError, match="not a probe dump"):
        ProbeDump(res.probe_dir)  # an empty host-made dir, not the host dir the link named
    with pytest.raises(ProfileError, match=r"holds no profile\.json"):
        build_profile_report(res.profile_dir, repo)
    assert _snapshot(host["dir"]) == before
    assert not host["absent"].exists() and not Path(str(host["absent"]) + ".d").exists()
    _no_secret_anywhere(tmp_path, res.model_dump_json())


def test_artifact_dirs_replaced_by_files_are_refused_not_a_crash(tmp_path: Path):
    """A run that leaves a file where its probe/ and profile/ dirs were: the host made its empty
    copy dir under that name and crashed (FileExistsError, a traceback and failed_internal)."""
    src = tmp_path / "repo"
    src.mkdir()
    (src / "swap.py").write_text("import os, shutil\n"
                                 "for var in ('FERRY_PROBE_DIR', 'FERRY_PROFILE_DIR'):\n"
                                 "    shutil.rmtree(os.environ[var])\n"
                                 "    open(os.environ[var], 'w').write('not a dir')\n"
                                 "os._exit(0)\n")
    art = tmp_path / "art"
    res = run(RunRequest(path=src, command="python swap.py", device="cpu", probe=True, profile=True, timeout_s=120,
                         artifacts_dir=art))
    assert res.status == "ok", res.stderr_tail
    refused = _refused(res)
    assert refused["probe"].startswith("not a directory") and refused["profile"].startswith("not a directory")
    assert res.probe_dir == art / "collected" / "probe" and res.probe_dir.is_dir()
    assert res.profile_dir.is_dir() and not any(res.profile_dir.iterdir())
    with pytest.raises(DumpError, match="not a probe dump"):
        ProbeDump(res.probe_dir)
    saved = json.loads((art / "result.json").read_text())
    assert {"probe", "profile"} <= {r["path"] for r in saved["artifacts_refused"]}


def test_ferry_run_prints_the_refusals_and_escapes_program_text(repo: Path, tmp_path: Path, host):
    (repo / "noisy.py").write_text(
        "import os, re\n"
        "junit = re.search(r'--junit-xml=(\\S+)', os.environ['PYTEST_ADDOPTS']).group(1)\n"
        f"os.symlink({str(host['xml'])!r}, junit)\n"
        "print('title \\x1b]52;c;cm0gLXJmIH4=\\x07 \\x1b[2J done')\n"
        "raise SystemExit('boom \\x1b]0;pwned\\x07 end')\n")
    out = subprocess.run([sys.executable, "-m", "agent.cli", "run", str(repo), "--device", "cpu", "--artifacts",
                          str(tmp_path / "art"), "--", "python", "noisy.py"], capture_output=True, timeout=120)
    text = out.stdout.decode()
    assert out.returncode == 1, out.stderr.decode()[-2000:]
    assert "refused artifacts (1, not read" in text and "  junit.xml: symlink" in text
    assert "title   done" in text and "boom  end" in text
    assert "\x1b" not in text and "\x07" not in text and SECRET not in text


def test_log_lines_quoting_run_chosen_names_reach_the_terminal_escaped(tmp_path: Path):
    """The result text was escaped, but the warnings logged on the way (a refused artifact's name,
    chosen by the run) went to stderr as they were: OSC 52 and a screen clear reached the terminal."""
    src = tmp_path / "repo"
    src.mkdir()
    (src / "names.py").write_text(
        "import os, re\n"
        "junit = re.search(r'--junit-xml=(\\S+)', os.environ['PYTEST_ADDOPTS']).group(1)\n"
        "os.symlink('/etc/shadow', os.path.join(os.path.dirname(junit), 'x\\x1b]52;c;cm0gLXJmIH4=\\x07\\x1b[2Jy'))\n")
    out = subprocess.run([sys.executable, "-m", "agent.cli", "run", str(src), "--device", "cpu", "--artifacts",
                          str(tmp_path / "art"), "--", "python", "names.py"], capture_output=True, timeout=120)
    err = out.stderr.decode()
    assert out.returncode == 0, err[-2000:]
    assert "run artifact xy refused: symlink" in err  # still told, without the sequences
    assert "\x1b" not in err and "\x07" not in err
    assert "\x1b" not in out.stdout.decode()


def test_links_planted_by_both_runs_of_ferry_check_are_refused(repo: Path, tmp_path: Path, host):
    before = _snapshot(host["dir"])
    out = tmp_path / "check"
    # profile.md -> an existing root-only host file: the host must not write through it
    result = check(CheckRequest(path=repo, command=_command("files", host, host["json"]), out_dir=out, steps=1,
                                timeout_s=120, profile=True))
    assert result.reference.status == "ok" and result.target.status == "ok", result.target.stderr_tail
    notes = "\n".join(result.notes)
    for role in ("reference", "target"):
        for name in ("junit.xml", "redirect.jsonl", "probe/index.json", "probe/chunk_00000.pt"):
            assert f"the {role} run's {name} was refused and not read (symlink)" in notes
    assert "the target run's profile/profile.md was refused and not read (symlink)" in notes
    assert result.parity is None and result.profile is None and "no parity report" in notes
    assert "no profile:" in notes and result.status == "run_failed"
    assert _snapshot(host["dir"]) == before and not host["absent"].exists()
    report = Path(result.report_md).read_text()
    assert "refused and not read" in report
    _no_secret_anywhere(tmp_path, result.model_dump_json(), result_text(result), report)
    assert os.listdir(out / "target") and not (out / "target" / "child").exists()
