"""docs/idioms.md has a section for every rule id the code knows, anchored by the id lower-cased
(the link the scan table, SARIF and reports give), and is what scripts/idioms_doc.py makes of the
rules today; docs/numerics.md and docs/design.md, which user-facing texts link, exist."""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path

from agent.policy.catalogue import known_rules
from tools.doclinks import anchor, idiom

ROOT = Path(__file__).resolve().parents[2]
PAGE = ROOT / "docs" / "idioms.md"


def _anchors(text: str) -> set[str]:
    ids = set(re.findall(r'<a id="([^"]+)"></a>', text))
    # a heading's slug as GitHub makes it: lower case, spaces to '-', punctuation dropped
    for heading in re.findall(r"^#+ (.+)$", text, re.MULTILINE):
        ids.add(re.sub(r"[^\w\- ]", "", heading.lower()).replace(" ", "-"))
    return ids


def test_every_rule_the_code_knows_has_its_anchor():
    anchors = _anchors(PAGE.read_text(encoding="utf-8"))
    rules = list(known_rules())
    assert len(rules) > 60 and "FRY013" in rules and "float64_to_float32" in rules
    missing = [r for r in rules if anchor(r) not in anchors]
    assert not missing, missing
    assert idiom("FRY013") == "docs/idioms.md#fry013"


def test_the_page_is_generated_from_the_rules_of_today():
    spec = importlib.util.spec_from_file_location("idioms_doc", ROOT / "scripts" / "idioms_doc.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    text = module.render()
    assert text == PAGE.read_text(encoding="utf-8"), "run .venv/bin/python scripts/idioms_doc.py"
    section = text.split('<a id="fry050"></a>')[1].split("<a id=")[0]
    assert "### FRY050 `perf.host-sync`" in section and "**What Ferry does:** Ferry **reports** it" in section
    assert "**Why:**" in section
    assert "**What Ferry does:** Ferry **rewrites** it" in text.split('<a id="fry013"></a>')[1].split("<a id=")[0]


def test_the_linked_pages_ship():
    for page in ("idioms.md", "numerics.md", "design.md", "parity.md"):
        assert (ROOT / "docs" / page).is_file(), page
    numerics = (ROOT / "docs" / "numerics.md").read_text(encoding="utf-8")
    assert "(parity.md)" in numerics and "golden" in numerics and "drift" in numerics


def test_report_md_links_each_rules_section_for_codemod_and_policy_edits(tmp_path):
    from agent.migration.records import Edit
    from agent.migration.render import report_markdown
    from agent.migration.state import MigrationOptions, dump

    opts = MigrationOptions(source=str(tmp_path), run_command="python x.py", state_dir=str(tmp_path / "s"))
    edits = [Edit(step="rewrite", kind="codemod", rule="FRY002", files=["x.py"], diff="", reason="catalogue codemods",
                  rule_counts={"FRY002": 1, "FRY013": 2}),
             Edit(step="fix-1", kind="policy", rule="matmul_precision_highest", files=["x.py"], diff="", reason="r"),
             Edit(step="fix-2", kind="llm", rule="llm", files=["x.py"], diff="", reason="the model's edit")]
    state = {"migration_id": "m1", "options": opts.model_dump(mode="json"), "status": "migrated",
             "edits": [dump(e) for e in edits], "steps": [], "runs": []}
    text = report_markdown(state, "")
    assert ("what each rule does and why: [FRY002](docs/idioms.md#fry002), [FRY013](docs/idioms.md#fry013)"
            in text)
    assert "[matmul_precision_highest](docs/idioms.md#matmul_precision_highest)" in text
    assert "[llm](docs/idioms.md" not in text
