"""The case counts the README and docs/evals.md state are the suites' own: the synthetic suite's
``evals/suite/*/ferry-eval.toml`` and the real manifest's ``[[case]]`` entries (they drifted apart
once: the README said 27, docs/evals.md 26, the suite held 30)."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SYNTHETIC = sorted(p.parent.name for p in (ROOT / "evals" / "suite").glob("*/ferry-eval.toml"))
REAL = tomllib.loads((ROOT / "evals" / "real" / "manifest.toml").read_text(encoding="utf-8"))["case"]
README = (ROOT / "README.md").read_text(encoding="utf-8")
DOCS = (ROOT / "docs" / "evals.md").read_text(encoding="utf-8")

# Every sentence that states the current size of a suite (historical runs, "24 cases, 2026-12-01",
# are dated and not matched). Each pattern must match at least once: rewording one means updating it here.
SYNTHETIC_CLAIMS = [
    (README, r"synthetic suite \(`evals/suite/`, (\d+) small CUDA projects"),
    (README, r"\| synthetic \((\d+) cases, "),
    (DOCS, r"### The cases\s+(\d+) cases;"),
]
REAL_CLAIMS = [
    (README, r"`evals/real/manifest\.toml`: (\d+) cases"),
]


def _claims(pairs: list[tuple[str, str]]) -> list[tuple[str, int]]:
    found = []
    for text, pattern in pairs:
        numbers = [int(n) for n in re.findall(pattern, text)]
        assert numbers, f"no sentence matches {pattern!r}: update the pattern with the text"
        found += [(pattern, n) for n in numbers]
    return found


def test_the_synthetic_case_count_in_readme_and_docs_is_the_suites():
    assert len(SYNTHETIC) >= 20
    assert [(p, n) for p, n in _claims(SYNTHETIC_CLAIMS) if n != len(SYNTHETIC)] == []


def test_docs_evals_table_lists_every_synthetic_case_once():
    section = DOCS.split("### The cases", 1)[1].split("\n### ", 1)[0]
    rows = re.findall(r"^\| `([a-z0-9_.-]+)` \|", section, flags=re.M)
    assert sorted(rows) == SYNTHETIC


def test_the_real_case_count_in_the_readme_is_the_manifests():
    assert [(p, n) for p, n in _claims(REAL_CLAIMS) if n != len(REAL)] == []
