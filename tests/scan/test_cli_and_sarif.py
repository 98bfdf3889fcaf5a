"""`ferry scan` / `ferry rewrite` and the SARIF export."""

from __future__ import annotations

import json
import re
from pathlib import Path

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


def test_scan_table_is_as_wide_as_the_terminal_with_a_message_and_the_rules_links(tmp_path, capsys, monkeypatch):
    src = ("import torch\nx = torch.zeros(3).cuda()\nfor i in range(3):\n    loss = x.sum()\n    loss.backward()\n"
           "    print(loss.item())\n")
    (tmp_path / "train_with_a_rather_long_module_name.py").write_text(src, encoding="utf-8")
    monkeypatch.setenv("COLUMNS", "220")
    assert main(["scan", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    lines = out.splitlines()
    assert max(len(line) for line in lines) <= 220
    row = next(line for line in lines if "FRY050" in line and "│" in line)  # one row, not wrapped at 80 columns
    assert len(row) > 80
    assert "train_with_a_rather_long_module_name.py:6:11" in row
    assert ".item() in the training loop syncs the device every step" in row  # the message column
    assert "FRY050 perf.host-sync: docs/idioms.md#fry050" in out
    assert "FRY002 placement.cuda-method: docs/idioms.md#fry002" in out
    assert "2 findings (auto: 1, review: 1) in 1 file," in out


def test_sarif_messages_are_sentences_and_rules_link_their_section(tmp_path):
    from tools.doclinks import docs_url, home_url

    (tmp_path / "m.py").write_text(SRC, encoding="utf-8")
    out = tmp_path / "scan.sarif"
    assert main(["scan", str(tmp_path), "--sarif", str(out)]) == 0
    run = json.loads(out.read_text())["runs"][0]
    driver = run["tool"]["driver"]
    assert driver["informationUri"] == home_url() and "example.invalid" not in json.dumps(run)
    by_id = {r["id"]: r for r in driver["rules"]}
    assert by_id["FRY045"]["helpUri"] == docs_url() + "idioms.md#fry045"
    assert all(r["helpUri"].endswith("idioms.md#" + r["id"].lower()) for r in driver["rules"])
    assert run["results"][0]["message"]["text"] == ".cuda() moves to a CUDA device. Suggested: .to(device)."
    for r in run["results"]:
        assert not re.search(r"[a-z)] Suggested", r["message"]["text"]), r["message"]["text"]


def test_sarif_links_reach_the_shipped_docs_or_the_published_ones(monkeypatch):
    from tools import doclinks

    monkeypatch.delenv(doclinks.DOCS_URL_ENV, raising=False)
    page, _, anchor = doclinks.absolute(doclinks.idiom("FRY045")).partition("#")
    assert page.startswith("file:///") and Path(page.removeprefix("file://")).is_file() and anchor == "fry045"
    assert Path(doclinks.home_url().removeprefix("file://")).is_file()  # no guessed web address
    monkeypatch.setenv(doclinks.DOCS_URL_ENV, "https://docs.example.org/ferry/docs")
    assert doclinks.absolute(doclinks.idiom("FRY045")) == "https://docs.example.org/ferry/docs/idioms.md#fry045"
