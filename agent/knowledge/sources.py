"""What the knowledge base holds, gathered from Ferry's own code and data.

* ``codemod``: every catalogue rule (``tools.codemods.rules``: id, name, category, catalogue entries,
  DESCRIPTION, module docstring; FRY017 with the CUDA environment-variable table) with its golden
  before/after fixtures (``tests/codemods/fixtures/<ID>/*.in.py -> *.out.py``);
* ``fix``: every site fix (``tools.codemods.fixes``: FIX0NN) with its golden fixtures
  (``tests/codemods/fix_fixtures/<ID>``);
* ``policy``: every offline policy rule (``agent.policy.registry.policy_rules``: the rule id, the trace
  signature kinds it is keyed on with the signatures' patterns, its docstring; the residual-CUDA and
  op-fallback tables of the rules that use them);
* ``tier``: the numerics tiers (``tools.parity.tolerances``) and the tier section of docs/parity.md;
* ``earlier_fix``: fixes that resolved earlier migrations (``agent.knowledge.fixes``).

The fixtures and docs/ are read from the repository checkout when Ferry runs from one (an installed
package has neither: its knowledge base holds the rules' descriptions and the tables only).
"""

from __future__ import annotations

import inspect
import json
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

#: the directory holding the ``agent`` and ``tools`` packages: the repository checkout Ferry runs from,
#: or site-packages for an installed Ferry (which has no docs/ and no tests/codemods/)
CODE_ROOT = Path(__file__).resolve().parents[2]
MAX_FIXTURE_CHARS = 1500
MAX_FIXTURES = 6
MAX_EXAMPLE_CHARS = 600


@dataclass(frozen=True)
class Document:
    kind: str  # codemod | fix | policy | tier | earlier_fix
    id: str
    title: str
    body: str  # prose: descriptions, docstrings, reasons
    terms: str = ""  # identifiers: signature kinds, API names, code terms of the examples
    examples: str = ""  # golden before/after fixtures, diffs
    example: str = ""  # shown with a match: the first golden pair that changes, as a diff (or a fix's diff)

    @property
    def summary(self) -> str:
        text = " ".join(self.body.split())
        return text if len(text) <= 400 else text[:397] + "..."


def source_files(checkout: Path | None) -> list[Path]:
    """Every file the documents are built from (their contents key the index)."""
    code = CODE_ROOT
    files = [Path(__file__)]
    for folder, pattern in (("tools/codemods/rules", "*.py"), ("tools/codemods/fixes", "*.py"),
                            ("agent/policy", "*.py"), ("agent/policy", "*.json")):
        files += sorted((code / folder).glob(pattern))
    files += [code / "tools/codemods/tables.py", code / "tools/parity/tolerances.py",
              code / "tools/trace/signatures.py"]
    if checkout is not None:
        files += [checkout / "docs/parity.md", checkout / "docs/codemods.md"]
        for sub in ("fixtures", "fix_fixtures"):
            files += sorted((checkout / "tests/codemods" / sub).glob("*/*.py"))
    return [f for f in files if f.is_file()]


def _doc(obj: object) -> str:
    return inspect.cleandoc(obj.__doc__ or "") if obj is not None else ""


def example_diff(folder: Path) -> str:
    """The first golden pair in ``folder`` whose after differs from its before, as a short unified diff."""
    import difflib

    if not folder.is_dir():
        return ""
    for before in sorted(folder.glob("*.in.py")):
        after = before.with_name(before.name[: -len(".in.py")] + ".out.py")
        if not after.is_file():
            continue
        old, new = before.read_text(encoding="utf-8"), after.read_text(encoding="utf-8")
        if old != new:
            name = before.name[: -len(".in.py")]
            lines = difflib.unified_diff(old.splitlines(), new.splitlines(), f"{name} (before)", f"{name} (after)",
                                         n=1, lineterm="")
            return "\n".join(lines)[:MAX_EXAMPLE_CHARS]
    return ""


def _fixtures(folder: Path) -> str:
    """The golden pairs of one rule or fix, as text (each capped)."""
    if not folder.is_dir():
        return ""
    parts = []
    for before in sorted(folder.glob("*.in.py"))[:MAX_FIXTURES]:
        after = before.with_name(before.name[: -len(".in.py")] + ".out.py")
        text = f"# fixture {before.name[:-6]}: before\n{before.read_text(encoding='utf-8')[:MAX_FIXTURE_CHARS]}"
        if after.is_file():
            text += f"\n# after\n{after.read_text(encoding='utf-8')[:MAX_FIXTURE_CHARS]}"
        parts.append(text)
    return "\n\n".join(parts)


_CALL = re.compile(r"\.(\w+)\(")
_DOTTED = re.compile(r"\b(?:torch|nn|F|dist|cudnn|amp)(?:\.\w+)+")
_STRING = re.compile(r"[\"'](cuda|nccl|tpx|cpu)(?::\d+)?[\"']")


def code_terms(text: str) -> str:
    """Identifier terms of code or a trace, the same for documents and queries: a method call
    ``x.cuda()`` -> ``call_cuda``, a dotted API name ``torch.cuda.synchronize`` ->
    ``torch_cuda_synchronize``, a device string ``"cuda:0"`` -> ``str_cuda``."""
    found = [f"call_{m}" for m in _CALL.findall(text)]
    found += [m.replace(".", "_") for m in _DOTTED.findall(text)]
    found += [f"str_{m}" for m in _STRING.findall(text)]
    return " ".join(dict.fromkeys(found))


def _catalogue_rows(checkout: Path | None) -> dict[str, str]:
    """Rule id -> the catalogue idiom(s) docs/codemods.md's coverage table names for it."""
    if checkout is None or not (checkout / "docs/codemods.md").is_file():
        return {}
    rows: dict[str, list[str]] = {}
    for line in (checkout / "docs/codemods.md").read_text(encoding="utf-8").splitlines():
        cells = [c.strip() for c in line.split("|")]
        if len(cells) < 5 or not cells[1].isdigit():
            continue
        for rule in re.findall(r"\b(FRY\d{3})\b", cells[3]):
            rows.setdefault(rule, []).append(f"catalogue {cells[1]}: {cells[2]}")
    return {k: "\n".join(v) for k, v in rows.items()}


def _codemods(checkout: Path | None) -> Iterator[Document]:
    import importlib

    from tools.codemods.registry import all_rules
    from tools.codemods.tables import CUDA_ENV_VARS

    catalogue = _catalogue_rows(checkout)
    for rule in all_rules():
        module = importlib.import_module(rule.__module__)
        entries = ", ".join(str(e) for e in rule.ENTRIES)
        body = "\n".join(p for p in (rule.DESCRIPTION, _doc(module), catalogue.get(rule.ID, "")) if p)
        terms = code_terms(body)
        if rule.ID == "FRY017":  # the environment-variable table is this rule's data
            grouped: dict[tuple[str, str], list[str]] = {}
            for name, var in CUDA_ENV_VARS.items():
                grouped.setdefault((var.reason, var.equivalent), []).append(name)
            body += "\n" + "\n".join(f"{', '.join(names)}: {why}; {instead}"
                                     for (why, instead), names in grouped.items())
            terms += " " + " ".join(CUDA_ENV_VARS)
        folder = checkout / "tests/codemods/fixtures" / rule.ID if checkout else None
        yield Document("codemod", rule.ID, f"{rule.ID} {rule.NAME} ({rule.CATEGORY}; catalogue {entries or '-'})",
                       body, f"{rule.NAME} {terms}", _fixtures(folder) if folder else "",
                       example_diff(folder) if folder else "")


def _fixes(checkout: Path | None) -> Iterator[Document]:
    import importlib

    from tools.codemods.fixes import FIXES

    for fix in FIXES:
        body = "\n".join(p for p in (fix.DESCRIPTION, _doc(importlib.import_module(fix.__module__))) if p)
        folder = checkout / "tests/codemods/fix_fixtures" / fix.ID if checkout else None
        yield Document("fix", fix.ID, f"{fix.ID} {fix.NAME}", body, f"{fix.NAME} {code_terms(body)}",
                       _fixtures(folder) if folder else "", example_diff(folder) if folder else "")


def _pattern_words(pattern: str) -> str:
    """A signature's regex as the words it matches ("Torch not compiled with CUDA enabled")."""
    text = re.sub(r"\(\?P<\w+>[^)]*\)|\(\?[:i]\)|\\[bsSdwW]|\[[^\]]*\][*+?]?", " ", pattern)
    return " ".join(dict.fromkeys(re.findall(r"[A-Za-z_][\w']*", text)))


def _policy() -> Iterator[Document]:
    import importlib

    from agent.policy.registry import policy_rules
    from tools.trace.signatures import PATTERNS as SIGNATURES

    tables = {"residual_cuda_codemod": "residual_cuda.json", "unsupported_op_cpu_fallback": "op_fallbacks.json"}
    for rule in policy_rules():
        rule_id, kinds, fn = rule.ID, rule.KINDS, rule.apply
        module = importlib.import_module(fn.__module__)
        doc = _doc(fn) if fn.__name__ != "apply" else _doc(rule) if rule.__doc__ else _doc(module)
        sigs = [f"{s.kind}: {s.detail} ({_pattern_words(s.pattern)})" for s in SIGNATURES if s.kind in kinds]
        body = "\n".join([doc, *sigs])
        terms = " ".join([rule_id, *kinds, code_terms(doc)])
        if rule_id in tables:
            data = json.loads((Path(module.__file__ or "").parent / tables[rule_id]).read_text(encoding="utf-8"))
            body += "\n" + str(data.get("_doc", ""))
            names = [k for k in data if not k.startswith("_")]
            terms += " " + " ".join(n.replace(".", "_") for n in names)
            body += "\nCovers: " + ", ".join(names)
        yield Document("policy", rule_id, f"policy rule {rule_id} (signatures: {', '.join(kinds)})", body, terms)


def _section(text: str, heading: str) -> str:
    """A ``## heading`` section of a markdown file (to the next heading of that level)."""
    out: list[str] = []
    inside = False
    for line in text.splitlines():
        if line.startswith("## "):
            inside = line[3:].startswith(heading)
            continue
        if inside:
            out.append(line)
    return "\n".join(out).strip()


def _tiers(checkout: Path | None) -> Iterator[Document]:
    from tools.parity.tolerances import ASSERT_CLOSE, COSINE_MAX_ABS, COSINE_MIN, RATIO_PASS, RATIO_WARN, TIERED

    for dtype, tier in TIERED.items():
        (pf, pr), (wf, wr) = tier["pass"], tier["warn"]
        rtol, atol = ASSERT_CLOSE[dtype]
        body = (f"Numerics tier for {dtype} tensors (parity verdicts): pass when at most {pf:g} of the elements "
                f"differ by more than {pr:g} relative; warn when at most {wf:g} differ by more than {wr:g}; else "
                f"fail. First assert_close with rtol {rtol:g} atol {atol:g}; cosine > {COSINE_MIN} with max abs < "
                f"{COSINE_MAX_ABS:g} passes; with an fp32 golden run the error ratio passes at <= {RATIO_PASS} "
                f"and warns at <= {RATIO_WARN}.")
        yield Document("tier", f"tier:{dtype}", f"numerics tier {dtype}", body, f"{dtype} tolerance tier parity")
    if checkout is not None and (checkout / "docs/parity.md").is_file():
        section = _section((checkout / "docs/parity.md").read_text(encoding="utf-8"), "Comparing: the verdict")
        if section:
            yield Document("tier", "docs/parity.md#comparing", "docs/parity.md: the verdict for each tensor "
                           "(the tiers)", section, "tolerance tier parity verdict")


def gather(checkout: Path | None) -> list[Document]:
    """Every document but the earlier fixes (``agent.knowledge.fixes`` adds those)."""
    return [*_codemods(checkout), *_fixes(checkout), *_policy(), *_tiers(checkout)]


def default_checkout() -> Path | None:
    """The repository checkout Ferry runs from, or None for an installed package."""
    return CODE_ROOT if (CODE_ROOT / "tests/codemods/fixtures").is_dir() else None
