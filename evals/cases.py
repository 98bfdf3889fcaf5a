"""Eval suites and their cases, read from ``ferry-eval.toml`` (synthetic) or ``manifest.toml`` (real).

A synthetic case is ``<suite>/<name>/`` holding ``ferry-eval.toml``, ``repo/`` (what the agent sees:
the original CUDA code and its own tests) and ``grading/`` (hidden device-generic tests, copied into
the patched repo as ``ferry_grading/`` only when it is graded). A real case is an entry of
``evals/real/manifest.toml``: a public repository at a pinned commit, taken from a local mirror of
clones (nothing of its code is in this repository), with a data script of ours where it would
download data. See docs/evals.md for both formats.
"""

from __future__ import annotations

import re
import tomllib
from pathlib import Path
from typing import Annotated, Literal

from pydantic import BaseModel, Field, ValidationError, field_validator

from agent.errors import STATUSES, Status

EVALS_DIR = Path(__file__).resolve().parent
SYNTHETIC_SUITE = EVALS_DIR / "suite"
REAL_MANIFEST = EVALS_DIR / "real" / "manifest.toml"
REAL_DATA_DIR = EVALS_DIR / "real" / "data"
GRADING_DIRNAME = "ferry_grading"  # where the hidden tests land inside the patched repo

Difficulty = Literal["easy", "medium", "hard"]
# The sections of docs' CUDA idiom catalogue (docs/idioms.md), as cases name them.
IDIOM_GROUPS = ("placement", "runtime-queries", "memory", "streams-events-graphs", "rng", "amp-and-dtypes",
                "distributed", "data-compile-profiling", "kernels-and-third-party", "performance-idioms",
                "seen-in-real-repositories")
NodeId = Annotated[str, Field(min_length=1, pattern=r"^[^\s].*::.+$")]


class SuiteError(ValueError):
    """The suite or one of its manifests is unusable; the message names the file and the problem."""


class Grading(BaseModel):
    """Which tests decide a case (pytest node ids relative to the patched repo)."""

    fail_to_pass: list[NodeId] = Field(default_factory=list, description="fail on tpx before, must pass after")
    pass_to_pass: list[NodeId] = Field(default_factory=list, description="pass before, must keep passing")

    def all(self) -> list[str]:
        return [*self.fail_to_pass, *self.pass_to_pass]


class CaseSpec(BaseModel):
    """What every case says about itself, synthetic or real."""

    name: str = Field(pattern=r"^[a-z0-9][a-z0-9_.-]*$")
    description: str = ""
    difficulty: Difficulty = "medium"
    idiom_groups: list[str] = Field(default_factory=list)
    idioms: list[int] = Field(default_factory=list)
    run: str = Field(min_length=1)
    test: str | None = None
    expected_status: Status = "migrated"
    #: what a run with a model (``--policy llm``) must end with where that differs from the offline policy's
    #: (a case whose tests only a weakening turns green: the model's weakening ends ``guard_refused``)
    expected_status_llm: Status | None = None
    timeout_s: float = Field(default=900.0, gt=0)
    notes: str = ""

    @field_validator("idiom_groups")
    @classmethod
    def _known_groups(cls, value: list[str]) -> list[str]:
        bad = [g for g in value if g not in IDIOM_GROUPS]
        if bad:
            raise ValueError(f"unknown idiom group(s) {', '.join(bad)}; one of {', '.join(IDIOM_GROUPS)}")
        return value

    def expected_for(self, policy: str) -> Status:
        """The status a run under ``policy`` (offline, llm) must end with."""
        return self.expected_status_llm if policy == "llm" and self.expected_status_llm else self.expected_status

    @field_validator("expected_status", "expected_status_llm", mode="before")
    @classmethod
    def _known_status(cls, value: object) -> object:
        if isinstance(value, str) and value not in STATUSES:
            raise ValueError(f"unknown status {value!r}; one of {', '.join(STATUSES)}")
        return value


class SyntheticCase(CaseSpec):
    kind: Literal["synthetic"] = "synthetic"
    root: Path  # evals/suite/<name>
    grading: Grading = Field(default_factory=Grading)

    @property
    def repo(self) -> Path:
        return self.root / "repo"

    @property
    def grading_dir(self) -> Path:
        return self.root / "grading"


class RealCase(CaseSpec):
    kind: Literal["real"] = "real"
    repo_name: str = Field(alias="repo", pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]*/[A-Za-z0-9][A-Za-z0-9_.-]*$")
    commit: str = Field(pattern=r"^[0-9a-f]{40}$")
    packages: list[str] = Field(default_factory=list, description=(
        "the repository's own requirements (pip specs, `name[:module]`), installed with torch==2.13.0 into the "
        "case's own interpreter (evals.real_env); torch, torchvision, torchaudio and triton are never installed"))
    requirements: list[str] = Field(default_factory=list, description=(
        "requirement files of the repository (paths in its checkout) installed into the case's interpreter too"))
    data: str | None = Field(default=None, description="a script of ours in evals/real/data/ writing its data")
    env: dict[str, str] = Field(default_factory=dict, description="FERRY_*/TPX_* settings for its runs")
    control: bool = Field(default=False, description=(
        "a control: the program the command runs holds no CUDA, so it must be left unchanged and keep "
        "working (resolved: the run passes, parity and the CPU check pass, no file of the entry's directory "
        "changed, and the verdict does not claim `migrated`)"))

    model_config = {"populate_by_name": True}

    @field_validator("env")
    @classmethod
    def _ferry_keys(cls, value: dict[str, str]) -> dict[str, str]:
        bad = [k for k in value if not k.startswith(("FERRY_", "TPX_"))]
        if bad:
            raise ValueError(f"only FERRY_*/TPX_* settings reach the runs, not {', '.join(bad)}")
        return value

    @property
    def data_script(self) -> Path | None:
        return REAL_DATA_DIR / self.data if self.data else None


Case = SyntheticCase | RealCase


class Suite(BaseModel):
    name: str  # "synthetic", "real", or the directory's name
    cases: list[SyntheticCase | RealCase]

    def select(self, only: list[str] | None) -> Suite:
        if not only:
            return self
        names = {c.name for c in self.cases}
        unknown = sorted(set(only) - names)
        if unknown:
            raise SuiteError(f"no such case(s) in suite {self.name}: {', '.join(unknown)} "
                             f"(it has {', '.join(sorted(names))})")
        return Suite(name=self.name, cases=[c for c in self.cases if c.name in only])


def _toml(path: Path) -> dict[str, object]:
    try:
        return tomllib.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError) as exc:
        raise SuiteError(f"cannot read {path}: {exc}") from exc
    except tomllib.TOMLDecodeError as exc:
        raise SuiteError(f"{path} is not valid TOML: {exc}") from exc


def _errors(exc: ValidationError) -> str:
    return "; ".join(f"{'.'.join(str(p) for p in e['loc']) or 'case'}: {e['msg']}" for e in exc.errors())


def load_synthetic(root: Path) -> Suite:
    """Every ``*/ferry-eval.toml`` case under ``root``."""
    if not root.is_dir():
        raise SuiteError(f"suite directory {root} does not exist")
    cases: list[SyntheticCase | RealCase] = []
    for manifest in sorted(root.glob("*/ferry-eval.toml")):
        data = _toml(manifest)
        data.setdefault("name", manifest.parent.name)
        try:
            case = SyntheticCase.model_validate({**data, "root": manifest.parent})
        except ValidationError as exc:
            raise SuiteError(f"{manifest}: {_errors(exc)}") from exc
        if case.name != manifest.parent.name:
            raise SuiteError(f"{manifest}: name {case.name!r} differs from its directory {manifest.parent.name!r}")
        if not case.repo.is_dir():
            raise SuiteError(f"{manifest}: the case has no repo/ directory")
        if case.grading.all() and not case.grading_dir.is_dir():
            raise SuiteError(f"{manifest}: it names grading tests but has no grading/ directory")
        for node in case.grading.all():
            rel = node.split("::", 1)[0]
            where = case.grading_dir / rel.removeprefix(f"{GRADING_DIRNAME}/") if rel.startswith(
                f"{GRADING_DIRNAME}/") else case.repo / rel
            if not where.is_file():
                raise SuiteError(f"{manifest}: grading test {node!r} names {where}, which does not exist")
        cases.append(case)
    if not cases:
        raise SuiteError(f"{root} holds no */ferry-eval.toml cases")
    return Suite(name="synthetic" if root.resolve() == SYNTHETIC_SUITE else root.name, cases=cases)


def load_real(manifest: Path = REAL_MANIFEST) -> Suite:
    data = _toml(manifest)
    entries = data.get("case")
    if not isinstance(entries, list) or not entries:
        raise SuiteError(f"{manifest} holds no [[case]] entries")
    cases: list[SyntheticCase | RealCase] = []
    for i, entry in enumerate(entries):
        try:
            case = RealCase.model_validate(entry)
        except ValidationError as exc:
            raise SuiteError(f"{manifest}: case {i + 1}: {_errors(exc)}") from exc
        if case.data_script is not None and not case.data_script.is_file():
            raise SuiteError(f"{manifest}: case {case.name}: data script {case.data_script} does not exist")
        cases.append(case)
    names = [c.name for c in cases]
    dupes = sorted({n for n in names if names.count(n) > 1})
    if dupes:
        raise SuiteError(f"{manifest}: case names repeat: {', '.join(dupes)}")
    return Suite(name="real", cases=cases)


def load_suite(spec: str | Path | None) -> Suite:
    """``None`` or ``synthetic``: evals/suite; ``real``: evals/real/manifest.toml; a directory of
    ``*/ferry-eval.toml`` cases; or a ``manifest.toml`` of real cases."""
    if spec is None or str(spec) == "synthetic":
        return load_synthetic(SYNTHETIC_SUITE)
    if str(spec) == "real":
        return load_real()
    path = Path(spec).expanduser()
    if path.is_file() and path.suffix == ".toml":
        return load_real(path)
    return load_synthetic(path)


_SAFE = re.compile(r"[^A-Za-z0-9_.-]+")


def slug(text: str) -> str:
    """A file-name-safe form of a case name."""
    return _SAFE.sub("-", text).strip("-") or "case"
