"""Data the fix rules work on: the diagnosis, the context, and what a rule returns."""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import ClassVar, Literal

from pydantic import BaseModel, Field

from agent.errors import Status
from agent.migration.records import EditKind
from agent.migration.state import State, diagnosis_json, proposal_json
from agent.migration.workspace import current_text
from tools.codemods.fixes import FixResult, syntax_error
from tools.parity.models import ParityReport
from tools.patch import file_diff
from tools.trace.models import TestOutcome

logger = logging.getLogger(__name__)



class UserFrame(BaseModel):
    file: str  # relative to the repo root when inside it
    line: int
    function: str = ""
    source: str = ""


class Diagnosis(BaseModel):
    """What failed and where, from a run's parsed trace or a parity/profile finding."""

    # profile: findings worth a change (--llm only); cpu_check: the CPU guard rejected the model's edit
    phase: Literal["run", "test", "parity", "profile", "cpu_check"]
    kind: str = Field(description="trace signature kind (tpx_float64, mixed_devices, ...), parity_failed, "
                                  "profile_findings, or cpu_guard_rejected (phase cpu_check)")
    op: str | None = None
    exc_type: str = ""
    message: str = ""
    frames: list[UserFrame] = Field(default_factory=list, description="user frames, outermost first")
    run_status: str | None = None  # the failed run's status (failed, killed...), for run/test phases
    exit_code: int | None = None
    parity: ParityReport | None = Field(default=None, description="parity failures: the report (not checkpointed "
                                                                  "with the diagnosis: the state holds it)")
    earlier_edits: list[str] = Field(default_factory=list, description="the migration's non-codemod edits so far, "
                                                                       "for the model")
    tests: list[TestOutcome] = Field(default_factory=list, description="test failures: the test run's junit outcomes")
    rejected_diff: str = Field("", description="cpu_check: the model's edit the CPU guard rejected (and reverted)")
    previous: Diagnosis | None = Field(default=None, description="cpu_check: the failure the rejected edit was "
                                                                 "meant to fix (what the model is asked again)")

    @property
    def site(self) -> UserFrame | None:
        return self.frames[-1] if self.frames else None

    def where(self) -> str:
        site = self.site
        return f"{site.file}:{site.line}" if site else "(no user frame)"

    @property
    def first_line(self) -> str:
        """The message's first line ("" when there is no message)."""
        lines = self.message.splitlines()
        return lines[0] if lines else ""


class FixContext(BaseModel):
    source: Path
    workspace: Path | None = None
    files: dict[str, str] = Field(default_factory=dict)
    known_files: list[str] = Field(default_factory=list)
    entry_file: str | None = None
    #: notebooks the run command names (a notebook runner's program is in them)
    notebooks: list[str] = Field(default_factory=list)
    #: the repository files the run executed, in the order it began them (its probe dump's ``files_run``):
    #: where the command names no file of the repository, the program starts in the first of them
    files_run: list[str] = Field(default_factory=list)
    device_mode: str = "accelerator"
    tried: list[str] = Field(default_factory=list)
    #: rule ids the user asked to leave out (MigrationOptions.skip_rules): catalogue codemods and policy rules
    skip_rules: list[str] = Field(default_factory=list)

    def text(self, rel: str) -> str | None:
        return current_text(self.source, self.files, rel)

    def program_files(self) -> list[str]:
        """Where the program starts, first first: the entry file the command names, then the repository's
        files in the order the run executed them (``python -c``, ``bash train.sh``, a launcher or a console
        script name no file: their first module is the program's start). A notebook runner's program is in
        the notebooks the command names, not in the modules it imports: for it, the entry only."""
        found = [self.entry_file] if self.entry_file else []
        if self.notebooks:
            return found
        known = set(self.known_files)
        found += [rel for rel in self.files_run if rel in known and rel not in found]
        return found

    def untried_sites(self, rule: str, diag: Diagnosis) -> Iterator[tuple[UserFrame, str, str]]:
        """(frame, "file:line", file text) for the diagnosis's user frames, deepest first,
        skipping sites where ``rule`` was already tried and files that cannot be read."""
        for frame in reversed(diag.frames):
            site = f"{frame.file}:{frame.line}"
            if f"{rule}@{site}" in self.tried:
                continue
            text = self.text(frame.file)
            if text is not None:
                yield frame, site, text


class Proposal(BaseModel):
    """A concrete edit: new text for one or more files, with the diff and why."""

    rule: str
    kind: EditKind
    reason: str
    site: str
    files: dict[str, str]
    diff: str
    #: dtypes the edit changes (original -> new, "float64" -> "float32"): parity compares them at the new tier
    dtype_changes: dict[str, str] = Field(default_factory=dict)

    @property
    def key(self) -> str:
        return f"{self.rule}@{self.site}"


class Verdict(BaseModel):
    """No edit: the migration stops here with a named status and what is left."""

    rule: str
    status: Status
    summary: str


def make_proposal(ctx: FixContext, *, rule: str, kind: EditKind, reason: str, site: str,
                  new_files: dict[str, str]) -> Proposal | None:
    diffs = []
    changed: dict[str, str] = {}
    for rel, new in sorted(new_files.items()):
        old = ctx.text(rel)
        if old == new:
            continue
        changed[rel] = new
        diffs.append(file_diff(rel, old, new))
    if not changed:
        return None
    return Proposal(rule=rule, kind=kind, reason=reason, site=site, files=changed, diff="".join(diffs))


def new_text(result: FixResult | None) -> str | None:
    """The text a fix (``tools.codemods.fixes``) produced, or None when it changed nothing; its
    warnings are logged."""
    if result is None:
        return None
    for warning in result.warnings:
        logger.info("fix: %s", warning)
    return result.source if result.changed else None


def first_site_fix(ctx: FixContext, diag: Diagnosis, *, rule: str, fix: Callable[[UserFrame, str], str | None],
                   reason: Callable[[str], str]) -> Proposal | None:
    """A policy proposal for the first untried site of ``diag`` (deepest first) where ``fix(frame, text)``
    gives a changed file that still parses; ``reason(site)`` says why. None when no site can be fixed."""
    for frame, site, text in ctx.untried_sites(rule, diag):
        new = fix(frame, text)
        if new is None or new == text or syntax_error(new, frame.file) is not None:
            continue
        return make_proposal(ctx, rule=rule, kind="policy", site=site, new_files={frame.file: new},
                             reason=reason(site))
    return None


#: a rule keyed on every kind of its phase (it decides by the diagnosis' phase and evidence)
ANY_KIND = "*"


class PolicyRule:
    """One rule of the offline fix policy, found by ``agent.policy.registry`` in the ``rules_*`` modules.

    ``ID`` is what ``--skip-rule`` and the chat name (two classes may share one: the same fix reached
    from two kinds of evidence); ``KINDS`` the trace signature kinds it is asked about (``ANY_KIND``:
    every failure of its phase); ``ORDER`` its place among the rules asked about one kind (lower
    first, unique); ``DESCRIPTION`` what it does, for the people who name it; ``apply`` the diagnosis
    turned into a proposal (an edit), a verdict (a named status), or None (not this rule's case).
    """

    ID: ClassVar[str]
    KINDS: ClassVar[tuple[str, ...]]
    ORDER: ClassVar[int]
    DESCRIPTION: ClassVar[str] = ""

    @staticmethod
    def apply(diag: Diagnosis, ctx: FixContext) -> Proposal | Verdict | None:
        raise NotImplementedError

    @classmethod
    def verdict(cls, *, status: Status, summary: str) -> Verdict:
        """This rule's verdict: named by the rule's own ``ID`` (never a second spelling of it)."""
        return Verdict(rule=cls.ID, status=status, summary=summary)


def diagnosis_of(state: State) -> Diagnosis | None:
    """The migration state's stored diagnosis (None: none)."""
    raw = diagnosis_json(state)
    return Diagnosis.model_validate(raw) if raw else None


def proposal_of(state: State) -> Proposal | None:
    """The migration state's next edit to apply (None: none)."""
    raw = proposal_json(state)
    return Proposal.model_validate(raw) if raw else None
