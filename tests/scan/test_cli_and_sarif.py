"""`ferry scan` / `ferry rewrite` and the SARIF export."""

from __future__ import annotations

import json

from agent.cli import main
from tools.codemods.registry import all_rules

SRC = "import torch\nx = torch.ones(2).cuda()\nimport triton\n"


def test_scan_json_schema(tmp_path, capsys):
    (tmp_path / "m.py").write_text(SRC, encoding="utf-8")
    assert main(["scan", str(tmp_path), "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["schema_version"] == 1
    assert [(f["rule_id"], f["line"], f["category"]) for f in data["findings"]] == [
        ("FRY002", 2, "auto"), ("FRY045", 3, "unsupported")]
    assert data["findings"][0]["rewrite"] == ".to(device)"
    assert data["findings"][1]["blocks"] == ["tpx", "cpu"]


def test_scan_table(tmp_path, capsys):
    (tmp_path / "m.py").write_text(SRC, encoding="utf-8")
    assert main(["scan", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "FRY002" in out and "FRY045" in out and "2 findings" in out


def test_scan_sarif(tmp_path):
    (tmp_path / "m.py").write_text(SRC, encoding="utf-8")
    out = tmp_path / "scan.sarif"
    assert main(["scan", str(tmp_path), "--sarif", str(out)]) == 0
    log = json.loads(out.read_text())
    assert log["version"] == "2.1.0"
    run = log["runs"][0]
    rules = run["tool"]["driver"]["rules"]
    assert [r["id"] for r in rules] == [r.ID for r in all_rules()]  # one descriptor per rule
    assert len(rules) == 58
    results = run["results"]
    assert [r["ruleId"] for r in results] == ["FRY002", "FRY045"]
    assert results[1]["level"] == "error"
    for r in results:
        assert rules[r["ruleIndex"]]["id"] == r["ruleId"]
        region = r["locations"][0]["physicalLocation"]["region"]
        assert region["startLine"] >= 1 and region["startColumn"] >= 1
    assert run["originalUriBaseIds"]["SRCROOT"]["uri"].startswith("file://")


def test_rewrite_prints_diff_and_writes_only_with_write(tmp_path, capsys):
    p = tmp_path / "m.py"
    p.write_text(SRC, encoding="utf-8")
    assert main(["rewrite", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert out.startswith("diff --git a/m.py b/m.py")
    assert "+x = torch.ones(2).to(device)" in out
    assert p.read_text() == SRC
    assert main(["rewrite", str(tmp_path), "--write"]) == 0
    assert "x = torch.ones(2).to(device)" in p.read_text()


def test_rewrite_json(tmp_path, capsys):
    (tmp_path / "m.py").write_text(SRC, encoding="utf-8")
    assert main(["rewrite", str(tmp_path), "--device", "tpx", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["device"] == "tpx" and data["applied_rules"] == ["FRY002"]
    assert [r["rule_id"] for r in data["review"]] == ["FRY045"]


def test_bad_input_exits_2_with_a_clear_message(tmp_path, capsys):
    assert main(["scan", str(tmp_path / "nope")]) == 2
    assert "does not exist" in capsys.readouterr().err
    assert main(["scan", str(tmp_path), "--rules", "FRY777"]) == 2
    assert "unknown rule" in capsys.readouterr().err
    assert main(["rewrite", str(tmp_path), "--max-file-bytes", "0"]) == 2
