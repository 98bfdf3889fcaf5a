"""The knowledge base: built from Ferry's own rules, fixes, policy rules, tiers and fixtures; searched
with free text (a trace); earlier fixes recorded by the eval harness; the model's tool and first prompt."""

from __future__ import annotations

import json
import shutil
import sqlite3
import threading
from pathlib import Path

import pytest

from agent.cli import main
from agent.knowledge import KnowledgeBase, KnowledgeError, fts_query, prompt_section, record_fix
from agent.knowledge.sources import default_checkout
from agent.llm import scripted
from agent.llm.client import ChatClient
from agent.llm.config import LLMConfig
from agent.llm.fixer import run_fixer
from agent.llm.functions import EditSession, tool_schemas
from agent.migration.records import EditSummary, MigrationRecord
from agent.policy.base import Diagnosis, UserFrame
from evals.harness import migration_id, record_fixes

CHECKOUT = Path(__file__).resolve().parents[2]
# the message tpx raises (backend/kernels.py float64_error)
FLOAT64 = ("TypeError: tpx does not support torch.float64 (aten::_to_copy to torch.float64): the device has no "
           "float64 units. Use torch.float32 instead (e.g. .float(), dtype=torch.float32, or "
           "torch.set_default_dtype(torch.float32)), or keep this computation on the CPU.")
CUDA_TRACE = """Traceback (most recent call last):
  File "/work/repo/train.py", line 12, in <module>
    model = Net().cuda()
  File "/usr/lib/python3.11/site-packages/torch/nn/modules/module.py", line 1050, in cuda
    return self._apply(lambda t: t.cuda(device))
  File "/usr/lib/python3.11/site-packages/torch/cuda/__init__.py", line 310, in _lazy_init
    raise AssertionError("Torch not compiled with CUDA enabled")
AssertionError: Torch not compiled with CUDA enabled
"""


@pytest.fixture(scope="module")
def kb(tmp_path_factory) -> KnowledgeBase:
    base = KnowledgeBase(tmp_path_factory.mktemp("kb"), default_checkout())
    base.build()
    return base


def _ids(kb: KnowledgeBase, text: str, k: int = 3) -> list[str]:
    return [m.id for m in kb.search(text, k)]


def test_the_sources_are_the_repositorys_own(kb):
    assert default_checkout() == CHECKOUT  # the tests run from a checkout: its fixtures and docs are indexed
    with sqlite3.connect(kb.path) as conn:
        kinds = dict(conn.execute("SELECT kind, count(*) FROM docs GROUP BY kind").fetchall())
        fry002 = conn.execute("SELECT e.examples FROM docs d JOIN kb_examples e ON e.rowid = d.rowid "
                              "WHERE d.id = 'FRY002'").fetchone()[0]
    from agent.policy.registry import policy_rules
    from tools.codemods.fixes import FIXES
    from tools.codemods.registry import all_rules

    assert kinds["codemod"] == len(all_rules()) and kinds["fix"] == len(FIXES)
    assert kinds["policy"] == len(policy_rules())
    assert kinds["tier"] == 5  # four dtype tiers and docs/parity.md's verdict section
    golden = (CHECKOUT / "tests/codemods/fixtures/FRY002/tensor_and_module.out.py").read_text()
    assert golden[:200] in fry002  # the golden before/after pairs are the rule's examples


def test_a_trace_finds_the_rule_that_fixes_it(kb):
    # the message alone: the policy rule keyed on its signature (it applies the catalogue codemod at the line)
    assert _ids(kb, "AssertionError: Torch not compiled with CUDA enabled")[0] == "residual_cuda_codemod"
    # the whole trace: the user's frame `.cuda()` brings the catalogue rule for it up; torch's own frames do not count
    found = _ids(kb, CUDA_TRACE)
    assert found[0] == "residual_cuda_codemod" and "FRY002" in found
    assert set(_ids(kb, FLOAT64)) == {"FIX002", "float64_to_float32", "FRY029"}  # the dtype rule, fix and codemod
    assert _ids(kb, "NCCL")[0] == "FRY032"
    assert _ids(kb, "RuntimeError: No backend type associated with device type tpx")[0] == \
        "per_device_process_group_backend"
    assert _ids(kb, "RuntimeError: Expected all tensors to be on the same device, but found at least two devices, "
                    "tpx:0 and cpu!")[0] == "add_missing_device"
    assert _ids(kb, "NotImplementedError: aten::nonzero is not supported on tpx")[0] == "unsupported_op_cpu_fallback"


@pytest.mark.parametrize("text", ['AND', 'cuda AND', 'NOT nccl', '"unbalanced', 'float*', '(a OR b', 'NEAR(a b)',
                                  'col:x', '^start', 'title: cuda', "'; DROP TABLE kb; --", '', '  \n', '***'])
def test_fts_syntax_in_the_text_is_only_text(kb, text):
    matches = kb.search(text, 5)  # never an FTS5 syntax error
    assert isinstance(matches, list)
    query = fts_query(text)
    assert all(part.startswith('"') and part.endswith('"') and part.count('"') == 2
               for part in query.split(" OR ")) if query else not matches


def test_code_in_the_query_is_searched_as_code(kb):
    assert _ids(kb, "torch.cuda.synchronize()")[0] == "FRY013"


def test_the_index_is_rebuilt_when_a_source_changes(tmp_path):
    root = tmp_path / "checkout"
    for rel in ("docs/parity.md", "docs/codemods.md"):
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(CHECKOUT / rel, root / rel)
    shutil.copytree(CHECKOUT / "tests/codemods/fixtures/FRY002", root / "tests/codemods/fixtures/FRY002")
    kb = KnowledgeBase(tmp_path / "kb", root)
    assert kb.search("zanzibarwidget") == []
    key = kb.key()
    with sqlite3.connect(kb.path) as conn:
        assert conn.execute("SELECT value FROM meta").fetchone()[0] == key
    fixture = root / "tests/codemods/fixtures/FRY002/tensor_and_module.in.py"
    fixture.write_text(fixture.read_text() + "# zanzibarwidget\n")
    assert kb.key() != key
    assert [m.id for m in kb.search("zanzibarwidget")] == ["FRY002"]  # rebuilt before searching
    assert [p.name for p in kb.directory.iterdir()] == ["index.sqlite"]  # no temporary file left


def test_two_processes_building_at_once_each_leave_a_whole_index(tmp_path):
    kbs = [KnowledgeBase(tmp_path, None) for _ in range(2)]  # no checkout: the rules' descriptions only
    errors: list[BaseException] = []

    def build(kb: KnowledgeBase) -> None:
        try:
            kb.build()
        except BaseException as exc:  # reported below
            errors.append(exc)

    threads = [threading.Thread(target=build, args=(kb,)) for kb in kbs]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    assert sorted(p.name for p in tmp_path.iterdir()) == ["index.sqlite"]
    assert [m.id for m in kbs[0].search("NCCL", 1)] == ["FRY032"]


def test_a_recorded_fix_is_found_by_its_trace(kb):
    trace = "RuntimeError: tpx graph replay overflowed its launch queue at step 3 (queue depth 4096)"
    before = kb.search(trace, 3)
    assert all(m.kind != "earlier_fix" for m in before)
    fix_id = record_fix(case="queue_case", signature="other", exception=trace, rule="llm",
                        diff="--- a/train.py\n+++ b/train.py\n-graph.replay()\n+graph.replay(sync=True)\n",
                        reason="replay the graph synchronously", directory=kb.directory)
    found = kb.search(trace, 3)
    assert found[0].kind == "earlier_fix" and found[0].id == f"fix:{fix_id}" and found[0].label == "earlier fix"
    assert "queue_case" in found[0].title and "llm" in found[0].title
    kb.build()  # the fixes are kept across rebuilds
    assert kb.search(trace, 1)[0].id == f"fix:{fix_id}"


def test_the_harness_records_the_fixes_of_a_resolved_case(tmp_path, monkeypatch):
    monkeypatch.setenv("FERRY_KB_PATH", str(tmp_path / "kb"))
    out = tmp_path / "case"
    run = out / "state" / "artifacts" / migration_id("dtype_case") / "target-0"
    run.mkdir(parents=True)
    (run / "result.json").write_text(json.dumps({"status": "failed", "trace": {
        "exc_type": "TypeError", "message": FLOAT64.split(": ", 1)[1], "signature": {"kind": "tpx_float64"}}}))
    (out / "ferry.patch").write_text("diff --git a/m.py b/m.py\n--- a/m.py\n+++ b/m.py\n@@ -1 +1 @@\n"
                                     "-x = x.double()\n+x = x.float()\n")
    record = MigrationRecord(migration_id=migration_id("dtype_case"), status="migrated", source="repo",
                             run_command="python m.py", edits=[
                                 EditSummary(step="scan", kind="codemod", rule="FRY002", files=["m.py"], reason="r"),
                                 EditSummary(step="fix", kind="policy", rule="float64_to_float32", files=["m.py"],
                                             reason="tpx has no float64 -> compute in float32 at m.py:1")])
    assert record_fixes("dtype_case", record, out) == 1  # the codemod is in the catalogue already
    found = KnowledgeBase.default().search(FLOAT64, 5)
    earlier = [m for m in found if m.kind == "earlier_fix"]
    assert earlier and "dtype_case" in earlier[0].title and "float64_to_float32" in earlier[0].title
    assert "tpx_float64" in earlier[0].title


def test_the_search_tool_is_derived_from_its_model():
    schema = {t["function"]["name"]: t["function"] for t in tool_schemas()}["search_knowledge"]
    assert schema["parameters"]["required"] == ["query"] and schema["parameters"]["properties"]["k"]["maximum"] == 20


def test_the_fixer_shows_the_knowledge_base_and_the_model_can_search_it(tmp_path, monkeypatch):
    monkeypatch.setenv("FERRY_KB_PATH", str(tmp_path / "kb"))
    repo = tmp_path / "repo"
    repo.mkdir()
    (repo / "m.py").write_text("import torch\n\n\ndef metric(x):\n    return x.double().mean()\n")
    session = EditSession(repo, repo, {}, lambda *a: pytest.fail("unexpected run"), None, "python m.py", None)
    diag = Diagnosis(phase="run", kind="tpx_float64", exc_type="TypeError", message=FLOAT64.split(": ", 1)[1],
                     frames=[UserFrame(file="m.py", line=5, function="metric")])
    script = [
        scripted.reply(scripted.tool_call("search_knowledge", {"query": "NCCL", "k": 2})),
        scripted.reply(scripted.tool_call("apply_edit", {"path": "m.py", "search": "x.double()",
                                                         "replace": "x.float()"}, "c2"),
                       scripted.tool_call("finish", {"summary": "float32"}, "c3")),
    ]
    with scripted.ScriptedLLM(script) as server:
        cfg = LLMConfig(base_url=server.base_url, model="scripted-model", api_key="k")
        run_fixer(ChatClient(cfg), session, diag, [])
    first = server.requests[0]["body"]["messages"][1]["content"]
    section = first[first.index("Knowledge base"):]
    assert "float64_to_float32" in section and "FIX002" in section  # the top matches for the diagnosis
    assert "(before)" in section and "(after)" in section  # with their golden pairs' diffs
    tool_msg = next(m for m in server.requests[1]["body"]["messages"] if m["role"] == "tool")
    result = json.loads(tool_msg["content"])
    assert [r["id"] for r in result] == ["FRY032", "FRY033"] and result[0]["kind"] == "codemod rule"
    assert '-' in result[0]["example"] and "nccl" in result[0]["example"]  # its golden pair, as a diff


def test_the_cli_searches_and_rebuilds(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("FERRY_KB_PATH", str(tmp_path / "kb"))
    assert main(["knowledge", "rebuild"]) == 0
    assert "documents indexed in" in capsys.readouterr().out
    assert main(["knowledge", "search", "RuntimeError: No backend type associated with device type tpx",
                 "-k", "2"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("1. [policy rule] per_device_process_group_backend") and "2. " in out
    assert main(["knowledge", "search", "NCCL", "-k", "1", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)[0]["id"] == "FRY032"
    assert main(["knowledge", "search", "***"]) == 1  # nothing to search: said, not an error


def test_a_damaged_index_is_rebuilt_and_an_unusable_directory_is_a_clear_error(tmp_path):
    kb = KnowledgeBase(tmp_path / "kb", None)
    kb.directory.mkdir()
    kb.path.write_bytes(b"not an sqlite file at all" * 10)
    assert kb.search("NCCL", 1)[0].id == "FRY032"
    blocked = tmp_path / "a-file"
    blocked.write_text("")
    with pytest.raises(KnowledgeError, match="cannot"):
        KnowledgeBase(blocked / "kb", None).search("NCCL")
    diag = Diagnosis(phase="run", kind="other", exc_type="RuntimeError", message="NCCL error")
    assert prompt_section(diag, kb=KnowledgeBase(blocked / "kb", None)) is None  # the prompt goes without it
