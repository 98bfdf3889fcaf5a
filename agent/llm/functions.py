"""Tools the model may call, their schemas (from pydantic models) and their implementations.

Edits go to an overlay (``EditSession.files``), never straight to the workspace: the overlay
becomes a proposal that the graph applies (after approval under --approve) and re-verifies with
a target run. ``run``/``check_parity``/``profile`` execute a scratch copy holding the overlay.
"""

from __future__ import annotations

import json
import re
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, Field, ValidationError

from agent.errors import EditRejected, FerryAgentError, ToolCallError
from agent.migration import adapters
from agent.migration.runs import RunScheduler
from agent.policy.edits import check_parses
from tools import repofiles
from tools.patch import file_diff, list_source_files, read_text
from tools.runner.models import RunResult

MAX_READ_LINES = 200
MAX_RESULT_CHARS = 6000


# git diff header lines that change what a path is rather than its text
_NOT_CONTENT = re.compile(r"^((?:new file mode|deleted file mode|new mode|old mode|rename from|rename to|copy from|"
                          r"copy to|similarity index|GIT binary patch|Binary files)\b.*)$", re.M)


def _norm(rel: str) -> str:
    """A repo-relative path as the model may write it ('./train.py' -> 'train.py')."""
    rel = rel.strip().replace("\\", "/")
    while rel.startswith("./"):
        rel = rel[2:]
    return rel


class ReadFile(BaseModel):
    """Read lines [start, end] (1-based, inclusive) of a repository file, as the migration has it now."""

    path: str = Field(description="path relative to the repository root")
    start: int = Field(default=1, ge=1)
    end: int | None = Field(default=None, ge=1, description="last line; default start+199")


class SearchRepo(BaseModel):
    """Search the repository's source files for a regular expression; returns file:line: text."""

    pattern: str
    max_results: int = Field(default=40, ge=1, le=200)


class ApplyEdit(BaseModel):
    """Replace an exact snippet in a file (must occur exactly once). The result must parse."""

    path: str
    search: str = Field(description="exact text to find, including indentation")
    replace: str


class ApplyDiff(BaseModel):
    """Apply a unified diff (a/ b/ prefixes) to the current files. Every result must parse."""

    diff: str


class RunProgram(BaseModel):
    """Run the program (or its tests) on tpx with the edits made so far; returns status and trace."""

    which: Literal["run", "tests"] = "run"


class ScanRepo(BaseModel):
    """Scan the current files for CUDA idioms left; returns the findings."""


class CheckParity(BaseModel):
    """Run the program on tpx with a probe and compare with the reference run; returns the verdict."""


class Profile(BaseModel):
    """Run the program on tpx with the profiler; returns the findings."""


class SearchKnowledge(BaseModel):
    """Search Ferry's knowledge base (catalogue rules with before/after fixtures, fixes, offline policy
    rules, numerics tiers, earlier fixes) with free text: a trace, an exception message, an API name."""

    query: str = Field(min_length=1, max_length=4000)
    k: int = Field(default=5, ge=1, le=20, description="how many matches")


class Finish(BaseModel):
    """Stop: the edits made so far are the fix (they will be re-verified by a run)."""

    summary: str = Field(description="what was wrong and what the edits change")


TOOL_MODELS: dict[str, type[BaseModel]] = {
    "read_file": ReadFile, "search_repo": SearchRepo, "apply_edit": ApplyEdit, "apply_diff": ApplyDiff,
    "run": RunProgram, "scan": ScanRepo, "check_parity": CheckParity, "profile": Profile,
    "search_knowledge": SearchKnowledge, "finish": Finish,
}


def tool_schema(name: str, model: type[BaseModel], omit: tuple[str, ...] = ()) -> dict[str, Any]:
    """One OpenAI tool definition derived from ``model`` (its docstring is the description); ``omit``:
    fields the caller fills itself (not asked of the model)."""
    schema = model.model_json_schema()
    schema.pop("title", None)
    schema.pop("description", None)
    for field in omit:
        schema.get("properties", {}).pop(field, None)
        if field in schema.get("required", []):
            schema["required"].remove(field)
    return {"type": "function", "function": {
        "name": name, "description": (model.__doc__ or "").strip(), "parameters": schema}}


def tool_schemas() -> list[dict[str, Any]]:
    """OpenAI tool definitions, derived from the pydantic models."""
    return [tool_schema(name, model) for name, model in TOOL_MODELS.items()]


class EditSession:
    """The model's view of the repo: the migration's current files plus its own overlay."""

    def __init__(self, source: Path, workspace: Path, files: dict[str, str],
                 runner: Callable[[Path, str, bool, bool], RunResult],
                 reference_probe: str | None, run_command: str, test_command: str | None,
                 runs: RunScheduler | None = None) -> None:
        self.source = source
        self.workspace = workspace
        self.base = dict(files)
        self.files: dict[str, str] = {}  # the model's edits
        self.runner = runner
        self.reference_probe = reference_probe
        self.run_command = run_command
        self.test_command = test_command
        self.runs = runs  # to wait for a prewarm importing torch before comparing probe dumps
        self.finished: str | None = None
        self.known = sorted(set(list_source_files(source)) | set(files))

    # --- helpers --------------------------------------------------------------------------
    def text(self, rel: str) -> str:
        rel = _norm(rel)
        if rel in self.files:
            return self.files[rel]
        if rel in self.base:
            return self.base[rel]
        if rel not in self.known:
            raise ToolCallError(f"no such source file {rel!r}; known files: {', '.join(self.known[:30])}")
        try:  # the user's repository: no link followed, no FIFO opened
            return repofiles.read_text(self.source, rel)
        except repofiles.RepoFileError as exc:
            raise ToolCallError(f"source file {exc}") from None

    def migration_diff(self, rel: str) -> str:
        """What the migration so far (codemods and applied fixes) changed in ``rel``; '' if nothing."""
        rel = _norm(rel)
        if rel not in self.base:
            return ""
        return file_diff(rel, read_text(self.source / rel, self.source) or "", self.base[rel])

    def _set(self, rel: str, new: str) -> str:
        if rel.endswith(".py"):
            check_parses(new, rel)
        old = self.text(rel)
        self.files[rel] = new
        return file_diff(rel, old, new) or "(no change)"

    def scratch(self) -> Path:
        """A temporary copy of the workspace holding the overlay."""
        root = Path(tempfile.mkdtemp(prefix="ferry-llm-"))
        dest = root / self.workspace.name
        shutil.copytree(self.workspace, dest, symlinks=True, ignore=shutil.ignore_patterns("__pycache__"))
        for rel, text in self.files.items():
            (dest / rel).parent.mkdir(parents=True, exist_ok=True)
            (dest / rel).write_text(text, encoding="utf-8")
        return dest

    # --- tools ----------------------------------------------------------------------------
    def read_file(self, a: ReadFile) -> str:
        lines = self.text(a.path).splitlines()
        end = min(a.end or a.start + MAX_READ_LINES - 1, a.start + MAX_READ_LINES - 1, len(lines))
        return "\n".join(f"{i}: {lines[i - 1]}" for i in range(a.start, end + 1)) or "(empty range)"

    def search_repo(self, a: SearchRepo) -> str:
        try:
            rx = re.compile(a.pattern)
        except re.error as exc:
            raise ToolCallError(f"bad regular expression {a.pattern!r}: {exc}") from exc
        hits = []
        for rel in self.known:
            if not rel.endswith(".py"):
                continue
            for i, line in enumerate(self.text(rel).splitlines(), 1):
                if rx.search(line):
                    hits.append(f"{rel}:{i}: {line.strip()}")
                    if len(hits) >= a.max_results:
                        return "\n".join(hits)
        return "\n".join(hits) or "no matches"

    def apply_edit(self, a: ApplyEdit) -> str:
        text = self.text(a.path)
        count = text.count(a.search)
        if count != 1:
            raise EditRejected(f"the search text occurs {count} times in {a.path}; it must occur exactly once")
        return self._set(_norm(a.path), text.replace(a.search, a.replace, 1))

    def apply_diff(self, a: ApplyDiff) -> str:
        import subprocess

        tmp = Path(tempfile.mkdtemp(prefix="ferry-diff-"))
        try:
            touched = sorted(set(re.findall(r"^\+\+\+ b/(\S+)", a.diff, flags=re.M)))
            header = _NOT_CONTENT.search(a.diff)
            if header is not None:  # a link, a mode, a rename or a binary blob: none of them is an edit of text
                raise EditRejected(f"the diff has a {header.group(1).strip()!r} line; send changes of file text "
                                   "only (no new, deleted, renamed or linked files, no mode changes)")
            if not touched:
                raise EditRejected("the diff names no files (expected '+++ b/<path>' headers)")
            for rel in touched:
                (tmp / rel).parent.mkdir(parents=True, exist_ok=True)
                (tmp / rel).write_text(self.text(rel), encoding="utf-8")
            diff = a.diff if a.diff.endswith("\n") else a.diff + "\n"
            proc = subprocess.run(["git", "apply", "--recount", "-"], cwd=tmp, input=diff, text=True,
                                  capture_output=True)
            if proc.returncode != 0:
                raise EditRejected(f"the diff does not apply: {proc.stderr.strip()}")
            try:  # what git apply left: a link or a FIFO there is refused, never followed
                new = {rel: repofiles.read_text(tmp, rel) for rel in touched}
            except repofiles.RepoFileError as exc:
                raise EditRejected(f"the diff does not leave plain text files: {exc}") from None
            for rel, text in new.items():
                if rel.endswith(".py"):
                    check_parses(text, rel)
            return "".join(self._set(rel, text) for rel, text in new.items())
        finally:
            shutil.rmtree(tmp, ignore_errors=True)

    def _run(self, command: str, probe: bool, profile: bool) -> RunResult:
        ws = self.scratch()
        try:
            return self.runner(ws, command, probe, profile)
        finally:
            shutil.rmtree(ws.parent, ignore_errors=True)

    def run(self, a: RunProgram) -> str:
        command = self.run_command if a.which == "run" else self.test_command
        if command is None:
            raise ToolCallError("this repository has no test command; use which='run'")
        res = self._run(command, False, False)
        trace = res.trace
        return json.dumps({"status": res.status, "exit_code": res.exit_code,
                           "signature": trace.signature.model_dump(mode="json") if trace else {},
                           "exception": trace.exc_type if trace else None,
                           "message": (trace.message if trace else "")[:800],
                           "user_frames": [f.model_dump(mode="json") for f in trace.user_frames[-5:]] if trace else [],
                           "stderr_tail": res.stderr_tail[-1500:], "stdout_tail": res.stdout_tail[-800:]})

    def scan(self, a: ScanRepo) -> str:
        ws = self.scratch()
        try:
            rep = adapters.scan(ws)
        finally:
            shutil.rmtree(ws.parent, ignore_errors=True)
        return json.dumps([f.model_dump(mode="json") for f in rep.findings[:40]])

    def check_parity(self, a: CheckParity) -> str:
        if not self.reference_probe:
            raise ToolCallError("no reference probe dump is available for parity")
        res = self._run(self.run_command, True, False)
        if res.status != "ok" or res.probe_dir is None:
            return json.dumps({"error": "the probed run failed", "status": res.status,
                               "stderr_tail": res.stderr_tail[-1500:]})
        if self.runs is not None:
            self.runs.wait_prewarm()
        try:
            rep = adapters.compare(Path(self.reference_probe), res.probe_dir)
        except FerryAgentError as exc:  # a probe dump missing, refused or forged
            return json.dumps({"error": str(exc)})
        from agent.llm.evidence import metrics_lines

        out: dict[str, Any] = {"passed": rep.passed, "compared": rep.compared, "summary": rep.summary,
                               "first_divergence": rep.divergence_text()}
        if rep.first_divergence is not None:
            out["divergent_output"] = metrics_lines(rep.first_divergence.output)
        return json.dumps(out)

    def profile(self, a: Profile) -> str:
        res = self._run(self.run_command, False, True)
        if res.profile_dir is None:
            return json.dumps({"error": "no profile collected", "status": res.status})
        if self.runs is not None:
            self.runs.wait_prewarm()
        rep = adapters.profile_report(res.profile_dir, self.workspace)
        return json.dumps([f.model_dump(mode="json") for f in rep.findings[:20]])

    def search_knowledge(self, a: SearchKnowledge) -> str:
        from agent.knowledge import KnowledgeError, search

        try:
            matches = search(a.query, a.k)
        except KnowledgeError as exc:
            raise ToolCallError(f"the knowledge base cannot be searched here: {exc}") from exc
        return json.dumps([{"kind": m.label, "id": m.id, "title": m.title, "text": m.text, "example": m.example}
                           for m in matches] or "no matches")

    def finish(self, a: Finish) -> str:
        self.finished = a.summary
        return "ok"

    # --- dispatch -------------------------------------------------------------------------
    def call(self, name: str, raw_arguments: str | None) -> str:
        """Validate and run one tool call; ToolCallError/EditRejected go back to the model."""
        model = TOOL_MODELS.get(name)
        if model is None:
            raise ToolCallError(f"unknown tool {name!r}; available: {', '.join(TOOL_MODELS)}")
        try:
            args = json.loads(raw_arguments or "{}")
        except json.JSONDecodeError as exc:
            raise ToolCallError(f"arguments of {name} are not valid JSON: {exc}") from exc
        try:
            parsed = model.model_validate(args)
        except ValidationError as exc:
            raise ToolCallError(f"arguments of {name} do not match its schema: "
                                f"{exc.errors(include_url=False)}") from exc
        out: str = getattr(self, name)(parsed)  # TOOL_MODELS' keys name this class's tool methods
        return out if len(out) <= MAX_RESULT_CHARS else out[:MAX_RESULT_CHARS] + "\n... (truncated)"
