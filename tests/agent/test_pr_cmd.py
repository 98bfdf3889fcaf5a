"""ferry pr: a stable branch with one commit per step, pushed, and the PR text; a dirty tree refused;
the user's checkout is never touched and
no worktree or temporary directory outlives the command, whether the migration succeeds or not."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from agent.migration.facade import UnknownMigration, list_migrations, load
from tools.patch import git_apply

ROOT = Path(__file__).resolve().parents[2]

# A module with exactly representable weights and inputs: parity holds without any policy edit.
PROG = '''import torch
from torch import nn

device = torch.device("cuda")
model = nn.Linear(4, 2)
nn.init.constant_(model.weight, 0.5)
nn.init.zeros_(model.bias)
model = model.cuda()
x = torch.arange(8, dtype=torch.float32).reshape(2, 4).cuda()
for step in range(2):
    print(f"step {step} loss {(model(x) * (step + 1)).sum().item():.4f}")
'''

BROKEN = '''import torch

x = torch.ones(2).cuda()
raise SystemExit("broken on purpose")
'''

SLOW = '''import time

import torch

x = torch.ones(2).cuda()
time.sleep(60)
'''


def _git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(repo), *args], capture_output=True, text=True, check=True).stdout.strip()


def _repo(tmp_path: Path, files: dict[str, str]) -> Path:
    repo = tmp_path / "repo"
    for rel, text in files.items():
        (repo / rel).parent.mkdir(parents=True, exist_ok=True)
        (repo / rel).write_text(text)
    _git(repo, "init", "-q", "-b", "main")
    _git(repo, "add", ".")
    _git(repo, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "-m", "init")
    return repo


def _checkout(repo: Path) -> dict[str, object]:
    """Everything of the user's checkout that ferry pr must leave alone, byte for byte."""
    files = {str(p.relative_to(repo)): p.read_bytes() for p in sorted(repo.rglob("*"))
             if p.is_file() and ".git" not in p.relative_to(repo).parts}
    git = repo / ".git"
    return {"files": files, "index": (git / "index").read_bytes(), "HEAD": (git / "HEAD").read_bytes(),
            "head_commit": _git(repo, "rev-parse", "HEAD"), "worktrees": _git(repo, "worktree", "list", "--porcelain"),
            "stash": _git(repo, "stash", "list")}


def _env(tmp_path: Path) -> dict[str, str]:
    """A private TMPDIR, so leaked temporary directories can be seen; no model configured."""
    tmp = tmp_path / "tmpdir"
    tmp.mkdir(exist_ok=True)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("FERRY_LLM", "FERRY_DATABASE"))}
    env["TMPDIR"] = str(tmp)
    return env


def _assert_nothing_leaked(repo: Path, tmp_path: Path) -> None:
    assert _git(repo, "worktree", "list", "--porcelain").count("worktree ") == 1
    assert not (repo / ".git" / "worktrees").exists() or not any((repo / ".git" / "worktrees").iterdir())
    assert [p.name for p in (tmp_path / "tmpdir").iterdir() if p.name.startswith("ferry-pr")] == []


def _pr(tmp_path: Path, path: Path, run: str, *extra: str,
        env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "agent.cli", "pr", str(path), "--run", run, "--json",
                           "--state-dir", str(tmp_path / "state"), "--out", str(tmp_path / "out"), *extra],
                          cwd=ROOT, env={**_env(tmp_path), **(env or {})}, capture_output=True, text=True, timeout=600)


@pytest.mark.slow
def test_pr_makes_a_stable_branch_updates_it_on_a_rerun_and_pushes_it(tmp_path):
    readme = "# demo\n"
    repo = _repo(tmp_path, {"README.md": readme, "app/prog.py": PROG})
    remote = tmp_path / "remote.git"
    subprocess.run(["git", "init", "-q", "--bare", str(remote)], check=True)
    _git(repo, "remote", "add", "origin", str(remote))
    _git(repo, "push", "-q", "origin", "main")
    base_sha = _git(repo, "rev-parse", "HEAD")
    # the user's work in progress outside the migrated directory: a staged edit and an untracked file
    (repo / "README.md").write_text(readme + "staged line\n")
    _git(repo, "add", "README.md")
    (repo / "notes.txt").write_text("untracked\n")
    marker = tmp_path / "hook-ran"
    for hook in ("post-checkout", "pre-commit", "post-commit", "reference-transaction", "pre-push"):
        script = repo / ".git" / "hooks" / hook
        script.write_text(f"#!/bin/sh\necho {hook} >> {marker}\n")
        script.chmod(0o755)
    before = _checkout(repo)

    res = _pr(tmp_path, repo / "app", "python prog.py", "--push", "origin", "--author", "Ann Example <ann@example.com>",
              env={"FERRY_GIT_COMMITTER": "CI Bot <ci@example.com>"})
    assert res.returncode == 0, res.stdout[-2000:] + res.stderr[-3000:]
    out = json.loads(res.stdout)
    branch = out["branch"]
    assert out["status"] == "migrated" and out["base"] == "main" and branch == "ferry/migrate-tpx"
    assert out["pushed"] and not out["updated"] and not out["unchanged"]
    assert _checkout(repo) == before  # working tree, index, HEAD, current branch: untouched
    assert _git(repo, "branch", "--format=%(refname:short)").splitlines() == [branch, "main"]
    assert _git(remote, "rev-parse", f"refs/heads/{branch}") == out["head"] == _git(repo, "rev-parse", branch)

    # one commit per step on top of the base, the last holding exactly the verified patch
    shas = _git(repo, "rev-list", "--reverse", f"main..{branch}").splitlines()
    assert shas == [c["sha"] for c in out["commits"]] and len(shas) >= 1
    assert _git(repo, "rev-parse", f"{shas[0]}^") == base_sha
    assert _git(repo, "diff", "--name-only", "main", branch).splitlines() == ["app/prog.py"]
    assert out["commits"][0]["subject"] == "Rewrite CUDA idioms device-generically in prog.py"
    assert "Rules: FRY" in _git(repo, "log", "-1", "--format=%B", shas[0])
    assert _git(repo, "log", "-1", "--format=%an <%ae>|%cn <%ce>", branch) == \
        "Ann Example <ann@example.com>|CI Bot <ci@example.com>"
    patch = (tmp_path / "out" / "ferry.patch").read_text()
    expected = tmp_path / "expected"
    expected.mkdir()
    (expected / "prog.py").write_text(PROG)
    git_apply(expected, patch)
    migrated = _git(repo, "show", f"{branch}:app/prog.py") + "\n"
    assert migrated == (expected / "prog.py").read_text() and ".cuda()" not in migrated
    assert _git(repo, "show", f"{branch}:README.md") + "\n" == readme  # the staged change stays the user's
    assert not marker.exists(), marker.read_text()  # the user's hooks did not run for ferry's git calls

    text = (tmp_path / "out" / "pr.md").read_text()
    assert f"Branch `{branch}` onto `main`" in text and "**Status:** migrated" in text
    assert "| rule | by | sites | files | what |" in text and "| `FRY002` | codemod | " in text
    assert "- `prog.py` (modified, +" in text
    row = next(line for line in text.splitlines() if line.startswith("| `Linear#0:out`"))
    assert [c.strip() for c in row.strip("|").split("|")][1:6] == ["1", "0", "0", "assert_close", "pass"]
    assert "## Left for a human" in text and "- [ ] Run the migrated code once on a CUDA machine" in text
    assert f"- `{shas[0][:10]}` Rewrite CUDA idioms" in text
    assert "ferry pr " in text.split("## Reproduce", 1)[1] and "--push origin" in text
    _assert_nothing_leaked(repo, tmp_path)

    assert "## Reproduce\n\nFrom the repository's root:\n\n```sh\nferry pr app --base main --run 'python prog.py' " \
           "--push origin\n```\n" in text  # no --json, --out or --state-dir of this machine

    # the same base again: the branch already holds this migration, so it is not moved
    again = json.loads(_pr(tmp_path, repo / "app", "python prog.py").stdout)
    assert again["branch"] == branch and again["unchanged"] and again["head"] == out["head"]
    assert again["commits"] == out["commits"] and out["commits"][0]["files"] == ["app/prog.py"]  # as made
    # ... and so does a fresh clone of the remote (CI, the service), which has it only as origin's branch
    clone = tmp_path / "clone"
    subprocess.run(["git", "clone", "-q", "--branch", "main", str(remote), str(clone)], check=True)
    (tmp_path / "out").rename(tmp_path / "out-1")
    res = _pr(tmp_path, clone / "app", "python prog.py", "--push", "origin")
    fresh = json.loads(res.stdout)
    assert fresh["unchanged"] and fresh["head"] == out["head"] and fresh["pushed"], res.stderr[-2000:]
    assert _git(clone, "rev-parse", branch) == out["head"] == _git(remote, "rev-parse", f"refs/heads/{branch}")
    # the same result, the same text, byte for byte: a weekly job leaves the pull request as it is
    assert (tmp_path / "out" / "pr.md").read_text() == text

    # a new base commit: the same branch is moved onto it (compare-and-swap), nothing else changes
    _git(repo, "stash", "-q")  # (the staged README edit)
    (repo / "app" / "extra.py").write_text("X = 1\n")
    _git(repo, "add", "app/extra.py")
    _git(repo, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "-m", "more")
    res = _pr(tmp_path, repo / "app", "python prog.py", "--push", "origin")
    third = json.loads(res.stdout)
    assert third["updated"] and third["branch"] == branch and third["head"] != out["head"], res.stderr[-2000:]
    assert _git(repo, "rev-parse", f"{third['commits'][0]['sha']}^") == _git(repo, "rev-parse", "main")
    assert _git(remote, "rev-parse", f"refs/heads/{branch}") == third["head"]
    assert _git(repo, "branch", "--format=%(refname:short)").splitlines() == [branch, "main"]
    _assert_nothing_leaked(repo, tmp_path)


@pytest.mark.slow
def test_a_refused_push_says_the_branch_moved_and_a_rerun_only_pushes_it(tmp_path):
    repo = _repo(tmp_path, {"prog.py": PROG})
    remote = tmp_path / "remote.git"
    subprocess.run(["git", "init", "-q", "--bare", str(remote)], check=True)
    _git(repo, "remote", "add", "origin", str(remote))
    _git(repo, "push", "-q", "origin", "main")
    gate = remote / "hooks" / "pre-receive"  # the remote's own policy (Ferry disables only local hooks)
    gate.write_text("#!/bin/sh\necho 'refused by the branch policy' >&2\nexit 1\n")
    gate.chmod(0o755)
    res = _pr(tmp_path, repo, "python prog.py", "--push", "origin")
    assert res.returncode == 1 and res.stdout == "", res.stderr[-3000:]
    head = _git(repo, "rev-parse", "ferry/migrate-tpx")
    assert f"the branch ferry/migrate-tpx holds the migration ({head[:12]}" in res.stderr
    assert "refused by the branch policy" in res.stderr
    assert "git push --force-with-lease origin ferry/migrate-tpx" in res.stderr
    assert "nothing of your checkout was changed" not in res.stderr
    text = (tmp_path / "out" / "pr.md").read_text()
    assert "## Reproduce" in text
    assert "- [ ] No test command was given, so no tests ran on the accelerator" in text  # none was
    assert "tests pass" not in text.split("## Changes by rule")[0]
    assert _git(remote, "branch", "--format=%(refname:short)") == "main"

    gate.unlink()  # the cause fixed: the re-run finds the branch up to date and pushes it as it is
    res = _pr(tmp_path, repo, "python prog.py", "--push", "origin")
    again = json.loads(res.stdout)
    assert again["unchanged"] and again["pushed"] and again["head"] == head, res.stderr[-2000:]
    assert _git(remote, "rev-parse", "refs/heads/ferry/migrate-tpx") == head
    _assert_nothing_leaked(repo, tmp_path)


def test_a_dirty_tree_is_refused_with_exit_2_and_nothing_happens(tmp_path):
    repo = _repo(tmp_path, {"prog.py": PROG, "lib/util.py": "A = 1\n"})
    (repo / "lib" / "util.py").write_text("A = 2\n")
    (repo / "new_helper.py").write_text("B = 1\n")
    (repo / ".gitignore").write_text("ignored.log\n")
    before = _checkout(repo)
    res = _pr(tmp_path, repo, "python prog.py")
    assert res.returncode == 2, res.stdout[-2000:] + res.stderr[-3000:]
    assert "changed: lib/util.py" in res.stderr and "untracked: .gitignore, new_helper.py" in res.stderr
    assert "git stash -u" in res.stderr and "git add -A && git commit" in res.stderr
    assert _checkout(repo) == before and _git(repo, "branch", "--format=%(refname:short)") == "main"
    assert not (tmp_path / "state").exists() or not list_migrations(tmp_path / "state")
    _assert_nothing_leaked(repo, tmp_path)
    # an ignored file is not the migration's business
    _git(repo, "checkout", "-q", "--", "lib/util.py")
    (repo / "new_helper.py").unlink()
    _git(repo, "add", ".gitignore")
    _git(repo, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "-m", "ignore")
    (repo / "ignored.log").write_text("x\n")
    res = _pr(tmp_path, repo, "python prog.py", "--author", "no email here")
    assert res.returncode == 2 and "--author" in res.stderr and "Name <email>" in res.stderr


def test_a_branch_checked_out_in_a_worktree_is_refused(tmp_path):
    repo = _repo(tmp_path, {"prog.py": PROG})
    _git(repo, "branch", "ferry/migrate-tpx")
    _git(repo, "checkout", "-q", "ferry/migrate-tpx")
    res = _pr(tmp_path, repo, "python prog.py", "--base", "main")
    assert res.returncode == 2 and "checked out in a work tree" in res.stderr, res.stderr[-2000:]
    res = _pr(tmp_path, repo, "python prog.py", "--branch", "bad..name")
    assert res.returncode == 2 and "not a valid branch name" in res.stderr


def test_failing_migration_creates_no_branch_and_leaks_nothing(tmp_path):
    repo = _repo(tmp_path, {"prog.py": BROKEN})
    before = _checkout(repo)
    res = _pr(tmp_path, repo, "python prog.py")
    assert res.returncode == 1, res.stdout[-2000:] + res.stderr[-3000:]
    out = json.loads(res.stdout)
    assert out["status"] == "needs_human" and out["branch"] is None and out["head"] is None
    assert "does not run with CUDA redirected to CPU" in out["summary"]
    assert _git(repo, "branch", "--format=%(refname:short)") == "main"
    assert _checkout(repo) == before
    text = (tmp_path / "out" / "pr.md").read_text()
    assert "No branch was made: the migration of `main` ended with status `needs_human`" in text
    assert "**Status:** needs_human" in text
    _assert_nothing_leaked(repo, tmp_path)


def _reference_run_started(sdir: Path) -> bool:
    """The checkpoint says ingest is done, so the (60 s) reference run is what runs now."""
    ids = list_migrations(sdir) if sdir.is_dir() else []
    try:
        return bool(ids) and any(s.node == "ingest" for s in load(ids[0], sdir).steps)
    except UnknownMigration:  # listed from its first checkpoint, which holds no state yet: not started
        return False


def test_interrupted_pr_leaks_nothing(tmp_path):
    repo = _repo(tmp_path, {"prog.py": SLOW})
    before = _checkout(repo)
    proc = subprocess.Popen([sys.executable, "-m", "agent.cli", "pr", str(repo), "--run", "python prog.py", "--json",
                             "--state-dir", str(tmp_path / "state"), "--out", str(tmp_path / "out")],
                            cwd=ROOT, env=_env(tmp_path), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 300  # a hang guard: wait until the reference run is under way, then Ctrl-C
        while not _reference_run_started(tmp_path / "state"):
            assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()
            time.sleep(0.1)
        assert _git(repo, "worktree", "list", "--porcelain").count("worktree ") == 2  # the migration's worktree
        proc.send_signal(signal.SIGINT)
        stdout, stderr = proc.communicate(timeout=300)  # the teardown, on a machine the rest of the suite loads
    finally:
        if proc.poll() is None:
            proc.kill()
    # 130 from ferry's handler; CPython itself turns the exit into -SIGINT when the interrupt landed
    # inside code it ran through PyRun_* (e.g. an extension module's embedded Python), even once handled
    assert proc.returncode in (130, -signal.SIGINT), (proc.returncode, stdout[-2000:], stderr[-3000:])
    assert "ferry: interrupted" in stderr and stdout == ""
    assert _git(repo, "branch", "--format=%(refname:short)") == "main"
    assert _checkout(repo) == before
    _assert_nothing_leaked(repo, tmp_path)


def test_pr_outside_git_is_a_usage_error(tmp_path):
    res = subprocess.run([sys.executable, "-m", "agent.cli", "pr", str(tmp_path), "--run", "python x.py"],
                         cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert res.returncode == 2 and "not inside a git repository" in res.stderr


def test_pr_of_an_uncommitted_directory_is_a_usage_error(tmp_path):
    repo = _repo(tmp_path, {"prog.py": PROG})
    (repo / "new").mkdir()
    (repo / "new" / "prog.py").write_text(PROG)
    res = subprocess.run([sys.executable, "-m", "agent.cli", "pr", str(repo / "new"), "--run", "python prog.py"],
                         cwd=ROOT, env=_env(tmp_path), capture_output=True, text=True, timeout=120)
    assert res.returncode == 2 and "new is not in the committed main" in res.stderr and "commit it first" in res.stderr
    _assert_nothing_leaked(repo, tmp_path)


def test_pr_takes_migrates_flags_for_the_rewrite_and_the_runs_environment(tmp_path, monkeypatch):
    """--device, --skip-rule, --python, --env, --cwd: migrate's own definitions, checked the same way
    before anything starts, and handed to the migration."""
    from agent.cli import CliError, build_parser, pr_cmd
    from agent.prbot.pr.models import PrRefused

    parser = build_parser()
    subs = next(a for a in parser._actions if a.dest == "command").choices
    shared = ("device", "skip_rules", "python", "env", "cwd")
    for dest in shared:
        mine, theirs = ([a for a in subs[name]._actions if a.dest == dest] for name in ("pr", "migrate"))
        assert [(a.option_strings, a.help, a.choices, a.default) for a in mine] == \
            [(a.option_strings, a.help, a.choices, a.default) for a in theirs], dest
    repo = _repo(tmp_path, {"prog.py": PROG, "sub/data.py": "A = 1\n"})
    seen = []

    def fake_make_pr(req, progress=None, runs=None):
        seen.append(req)
        raise PrRefused("stopped by the test")

    monkeypatch.setattr("agent.prbot.pr.core.make_pr", fake_make_pr)
    monkeypatch.delenv("VIRTUAL_ENV", raising=False)
    argv = ["pr", str(repo), "--run", "python prog.py", "--json", "--device", "tpx", "--skip-rule", "FRY013",
            "--skip-rule", "FRY013", "--python", sys.executable, "--env", "HF_HOME=/tmp/hf", "--cwd", "sub"]
    with pytest.raises(CliError, match="stopped by the test"):
        pr_cmd.run(parser.parse_args(argv))
    req = seen[0]
    assert (req.device, req.skip_rules, req.env, req.cwd, req.python) == (
        "tpx", ["FRY013"], {"HF_HOME": "/tmp/hf"}, "sub", None)  # Ferry's own interpreter: None, as migrate
    for bad, why in ((["--skip-rule", "FRY999"], "--skip-rule"), (["--env", "PATH=/x"], "--env PATH"),
                     (["--cwd", "../elsewhere"], "--cwd ../elsewhere"), (["--python", str(tmp_path / "nope")], "nope")):
        with pytest.raises(CliError, match=why):
            pr_cmd.run(parser.parse_args(["pr", str(repo), "--run", "python prog.py", *bad]))
    assert len(seen) == 1  # each refused before the migration started
