"""The migration's edits as commits: one per logical step, every file's order of changes kept, and a
fallback to one commit of the verified patch when the steps do not replay to its tree."""

from __future__ import annotations

import subprocess
from pathlib import Path

from agent.migration.records import Edit
from agent.prbot.pr import gitops
from agent.prbot.pr.core import _commit_steps
from agent.prbot.pr.steps import is_test_file, plan_commits
from tools.patch import file_diff

ORIG = {"train.py": "x = 1\nd = 'cuda'\n", "tests/test_t.py": "d = 'cuda'\n", "model.py": "m = 'cuda'\n"}


def _edit(step: str, kind: str, rule: str, before: dict[str, str], after: dict[str, str], reason: str = "") -> Edit:
    diff = "".join(file_diff(rel, before.get(rel), text) for rel, text in sorted(after.items()))
    return Edit(step=step, kind=kind, rule=rule, files=sorted(after), diff=diff, reason=reason or f"{rule} did it")


def _edits() -> list[Edit]:
    """The rewrite (one edit per file, in file order), a precision fix, then the model's fix of train.py."""
    rw = {"train.py": "x = 1\nd = dev\n", "tests/test_t.py": "d = dev\n", "model.py": "m = dev\n"}
    edits = [_edit("rewrite", "codemod", "FRY001,FRY004", ORIG, {"model.py": rw["model.py"]}),
             _edit("rewrite", "codemod", "FRY001", ORIG, {"tests/test_t.py": rw["tests/test_t.py"]}),
             _edit("rewrite", "codemod", "FRY001", ORIG, {"train.py": rw["train.py"]})]
    prec = {"train.py": "torch.set_float32_matmul_precision('highest')\nx = 1\nd = dev\n"}
    edits.append(_edit("fix-1", "policy", "matmul_precision_highest", rw, prec, "parity pointed at matmul"))
    model = {"train.py": prec["train.py"] + "y = 2\n", "model.py": "m = dev  # ok\n"}
    edits.append(_edit("fix-2", "llm", "llm", {**rw, **prec}, model, "model: fixed it"))
    return edits


def test_edits_group_into_logical_steps_keeping_each_files_order():
    steps = plan_commits(_edits())
    assert [(s.cls, s.files) for s in steps] == [
        ("codemods", ["model.py", "train.py"]), ("tests", ["tests/test_t.py"]),
        ("precision", ["train.py"]), ("model", ["model.py", "train.py"])]
    msg = steps[0].message()
    assert msg.startswith("Rewrite CUDA idioms device-generically in 2 files\n\n")
    assert "Rules: FRY001 (docs/idioms.md#fry001), FRY004 (docs/idioms.md#fry004)" in msg
    assert "Files: model.py, train.py" in msg
    assert steps[2].message().startswith("Adjust numeric precision for the accelerator in train.py")
    assert "- parity pointed at matmul" in steps[2].message()
    assert is_test_file("pkg/tests/x.py") and is_test_file("test_a.py") and is_test_file("conftest.py")
    assert not is_test_file("src/testing_utils_x.py") and not is_test_file("latest.py")


def test_a_commit_message_cites_ferrys_docs_and_repository_relative_paths_only():
    ws = "/tmp/ferry-space-1-2-n3-9eec3cb8/ws/ferry-ws-dxbrj528/app"
    edits = [_edit("rewrite", "codemod", "FRY013", ORIG, {"train.py": "x = 1\nd = dev\n"},
                   "catalogue codemods (docs/codemods.md)"),
             _edit("fix-1", "policy", "float64_to_float32", ORIG, {"model.py": "m = dev\n"},
                   f"float64 at {ws}/model.py:1 runs float32 matmuls (docs/numerics.md)")]
    codemods, precision = (s.message("app") for s in plan_commits(edits))
    assert "- catalogue codemods (docs/codemods.md)" in codemods and "FRY013 (docs/idioms.md#fry013)" in codemods
    assert "- float64 at app/model.py:1 runs float32 matmuls (docs/numerics.md)" in precision
    assert "tolerances of docs/numerics.md" in precision
    for text in (codemods, precision):
        assert "CUDA_IDIOMS" not in text and "NUMERICS.md" not in text and "ferry-" not in text


def _git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(repo), *args], capture_output=True, text=True, check=True).stdout.strip()


def _repo(tmp_path: Path) -> tuple[Path, str]:
    repo = tmp_path / "r"
    for rel, text in ORIG.items():
        (repo / rel).parent.mkdir(parents=True, exist_ok=True)
        (repo / rel).write_text(text)
    _git(repo, "init", "-q", "-b", "main")
    _git(repo, "add", ".")
    _git(repo, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "-m", "init")
    return repo, _git(repo, "rev-parse", "HEAD")


def _final_patch(edits: list[Edit]) -> str:
    state = dict(ORIG)
    for e in edits:  # the final texts, from the edits' "after" side
        for rel in e.files:
            state[rel] = _after(e, rel)
    return "".join(file_diff(rel, ORIG.get(rel), state[rel]) for rel in sorted(state) if state[rel] != ORIG.get(rel))


def _after(edit: Edit, rel: str) -> str:
    lines = [ln[1:] for ln in edit.diff.split(f"diff --git a/{rel} b/{rel}\n", 1)[1].split("diff --git", 1)[0]
             .splitlines(keepends=True) if ln.startswith((" ", "+")) and not ln.startswith("+++")]
    return "".join(lines)


def test_steps_replay_into_commits_whose_last_tree_is_the_verified_patch(tmp_path):
    repo, base = _repo(tmp_path)
    edits = _edits()
    env = gitops.identity_env(gitops.GitIdentity(name="F", email="f@x"), None)
    commits, note = _commit_steps(repo, base, "", plan_commits(edits), _final_patch(edits), env)
    assert note is None and len(commits) == 4
    assert _git(repo, "rev-list", "--count", f"{base}..HEAD") == "4"
    assert _git(repo, "show", "HEAD:train.py") == "torch.set_float32_matmul_precision('highest')\nx = 1\nd = dev\ny = 2"
    assert _git(repo, "show", f"{commits[1].sha}:tests/test_t.py") == "d = dev"
    assert _git(repo, "show", f"{commits[1].sha}:train.py") == "x = 1\nd = dev"  # the codemods came first


def test_steps_that_do_not_replay_fall_back_to_one_commit_of_the_patch(tmp_path):
    repo, base = _repo(tmp_path)
    edits = _edits()
    broken = edits[:3] + edits[4:]  # the precision edit is lost: the model's diff no longer applies
    env = gitops.identity_env(gitops.GitIdentity(), None)
    commits, note = _commit_steps(repo, base, "", plan_commits(broken), _final_patch(edits), env)
    assert note is not None and "one commit holds the verified patch" in note
    assert len(commits) == 1 and _git(repo, "rev-list", "--count", f"{base}..HEAD") == "1"
    assert _git(repo, "show", "HEAD:train.py").endswith("y = 2")
