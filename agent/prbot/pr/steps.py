"""The migration's edits as reviewable commits: one per logical step (the codemods, each class of fix,
the precision settings, the test changes), each saying what changed and why.

An edit's diff is against the state before it, so the edits replay in order. Per file the order is
kept; a step's changes move ahead of other steps' changes only where they touch other files, so
codemod edits of ``src/`` and ``tests/`` become two commits, not one per file.
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass, field
from pathlib import PurePosixPath

from agent.migration.records import Edit
from agent.prbot.pr.public import public_text, rule_doc

#: policy rules that change numeric precision (dtypes, matmul precision, test tolerances)
PRECISION_RULES = frozenset({"float64_to_float32", "matmul_precision_highest", "test_tolerance_matmul_precision"})
_RULE_ID = re.compile(r"FRY\d{3}")


def is_test_file(rel: str) -> bool:
    p = PurePosixPath(rel)
    return (any(part in ("tests", "test", "testing") for part in p.parts[:-1]) or p.name.startswith("test_")
            or p.name.endswith("_test.py") or p.name == "conftest.py")


def file_chunks(diff: str) -> list[tuple[str, str]]:
    """A multi-file git diff as (path, its chunk), in order."""
    parts = re.split(r"(?m)^(?=diff --git )", diff)
    out = []
    for part in parts:
        m = re.match(r"diff --git a/(\S+) b/(\S+)", part)
        if m:
            out.append((m.group(2), part))
    return out


def step_class(edit: Edit, rel: str) -> str:
    if is_test_file(rel) and edit.kind in ("codemod", "policy"):
        return "tests"
    if edit.kind == "codemod":
        return "codemods"
    if edit.kind == "policy":
        return "precision" if edit.rule in PRECISION_RULES else f"fix:{edit.rule}"
    return {"llm": "model", "human": "human", "revert": "revert"}[edit.kind]


@dataclass
class Chunk:
    cls: str
    path: str
    diff: str
    edit: Edit


@dataclass
class CommitStep:
    cls: str
    chunks: list[Chunk] = field(default_factory=list)

    @property
    def files(self) -> list[str]:
        return list(dict.fromkeys(c.path for c in self.chunks))

    @property
    def diff(self) -> str:
        return "".join(c.diff for c in self.chunks)

    def rules(self) -> list[str]:
        found: Counter[str] = Counter()
        for c in self.chunks:
            found.update(_RULE_ID.findall(c.edit.rule) or ([c.edit.rule] if c.edit.kind == "policy" else []))
        return sorted(found)

    def message(self, directory: str = "") -> str:
        """The commit message: what changed and why, each rule with its page in Ferry's docs, the edits'
        reasons with repository-relative paths (``directory``: the migrated one, "" for the root)."""
        files = self.files
        where = files[0] if len(files) == 1 else f"{len(files)} files"
        rules = ", ".join(f"{r} ({doc})" if (doc := rule_doc(r)) else r for r in self.rules())
        subject = {
            "codemods": f"Rewrite CUDA idioms device-generically in {where}",
            "tests": f"Make the tests device-generic in {where}",
            "precision": f"Adjust numeric precision for the accelerator in {where}",
            "model": f"Apply the model's fix in {where}",
            "human": f"Apply the reviewer's edit in {where}",
            "revert": f"Revert a rejected change in {where}",
        }.get(self.cls, f"Fix {self.cls.removeprefix('fix:')} in {where}")
        why = {
            "codemods": "Ferry's catalogue codemods (docs/codemods.md) replace CUDA-only calls with device-generic "
                        "PyTorch, so the same code runs on CUDA, on CPU and on the PrivateUse1 accelerator.",
            "tests": "The tests named CUDA directly; they now follow the device the code runs on.",
            "precision": "The accelerator's numerics differ from the reference's; these settings keep parity "
                         "within the tolerances of docs/numerics.md.",
        }.get(self.cls, "")
        body = [why] if why else []
        reasons = list(dict.fromkeys(c.edit.reason for c in self.chunks if c.edit.reason))
        body += [f"- {public_text(r, directory)}" for r in reasons[:10]]
        if rules:
            body.append(f"Rules: {rules}")
        body.append("Files: " + ", ".join(files))
        return subject + "\n\n" + "\n".join(body) + "\n"


def plan_commits(edits: list[Edit]) -> list[CommitStep]:
    """Group the edits' per-file changes into commits, keeping every file's order of changes."""
    pending = [Chunk(step_class(e, path), path, chunk, e) for e in edits for path, chunk in file_chunks(e.diff)]
    # the codemod edits are computed from the original one file each: the sources' go first, then the tests'
    pending.sort(key=lambda c: (c.edit.step != "rewrite", c.edit.step == "rewrite" and c.cls == "tests"))
    steps: list[CommitStep] = []
    while pending:
        cls = pending[0].cls
        step, rest, blocked = CommitStep(cls), [], set()
        for c in pending:
            if c.cls == cls and c.path not in blocked:
                step.chunks.append(c)
            else:
                rest.append(c)
                blocked.add(c.path)
        steps.append(step)
        pending = rest
    return steps
