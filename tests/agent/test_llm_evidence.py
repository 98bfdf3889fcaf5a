"""The parity evidence the model is shown, built from real ParityReport models (no runs)."""

from __future__ import annotations

from agent.llm import scripted
from agent.llm.client import ChatClient
from agent.llm.config import LLMConfig
from agent.llm.evidence import attribute_name, parity_evidence, source_snippets
from agent.llm.fixer import run_fixer
from agent.llm.functions import EditSession
from agent.policy.base import Diagnosis
from tools.parity.metrics import TensorMetrics
from tools.parity.models import Divergence, ModuleComparison, ParityReport, TensorComparison
from tools.parity.tolerances import tolerances_for

ORIGINAL = '''import torch
from torch import nn


class Gate(nn.Module):
    def forward(self, x):
        if x.is_cuda:
            return x * torch.sigmoid(x.half()).float()
        return x * torch.sigmoid(x)


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.blocks = nn.ModuleList([Gate(), Gate()])

    def forward(self, x):
        for block in self.blocks:
            x = block(x)
        return x
'''
MIGRATED = ORIGINAL.replace("if x.is_cuda:", "if x.device.type == device.type:")


def _output(key: str, module: str | None, kind: str = "module_output") -> TensorComparison:
    metrics = TensorMetrics(numel=64, max_abs=2.5e-3, max_rel=1.2e-3, cosine=0.99999, rmse=1e-3, nonfinite_mismatch=0,
                            frac_over_pass_rel=0.8, frac_over_warn_rel=0.3, assert_close_ok=False)
    return TensorComparison(key=key, kind=kind, module=module, call=0, step=0, verdict="fail", tier="tiered",
                            reason="80.0000% of elements off by > 0.01% (pass limit 0.01%)", ref_shape=[8, 8],
                            target_shape=[8, 8], ref_dtype="float32", target_dtype="float32", target_device="tpx:0",
                            metrics=metrics, tolerances=tolerances_for("float32"))


def _report(divergence: Divergence | None, scalars: list[TensorComparison] | None = None) -> ParityReport:
    modules = [ModuleComparison(order=0, key="Net.blocks.0#0", module="Net.blocks.0", call=0, step=0,
                                module_class="Gate", input_verdict="pass", output_verdict="fail", max_abs=2.5e-3,
                                cosine=0.99999),
               ModuleComparison(order=1, key="Net.blocks.1#0", module="Net.blocks.1", call=0, step=0,
                                module_class="Gate", input_verdict="fail", output_verdict="fail", max_abs=4e-3,
                                cosine=0.99998)]
    return ParityReport(verdict="fail", summary="parity FAIL: 1 pass, 0 warn, 3 fail", ref_dir="/r", target_dir="/t",
                        counts={"pass": 1, "fail": 3}, first_divergence=divergence, modules=modules,
                        tensors=[], scalars=scalars or [], notes=["a note from compare"],
                        target_meta={"final_matmul_precision": "highest", "tpx": {"matmul_precision": "highest",
                                                                                  "fallback_ops": []}})


def _divergence() -> Divergence:
    return Divergence(key="Net.blocks.0#0", module="Net.blocks.0", call=0, step=0, module_class="Gate", inputs="pass",
                      likely_cause="computation",
                      explanation="inputs pass but outputs differ well beyond precision effects",
                      ops=["sigmoid", "mul", "half"], output=_output("Net.blocks.0#0:out", "Net.blocks.0"))


def test_module_divergence_shows_metrics_tolerances_source_and_the_migration_diff():
    report = _report(_divergence())
    text = parity_evidence(report, ["net.py", "README.md"], {"net.py": MIGRATED}.get,
                           lambda rel: "-        if x.is_cuda:\n+        if x.device.type == device.type:\n")
    assert "probe key Net.blocks.0#0 = module Net.blocks.0 (class Gate, call 0, step 0); its inputs pass" in text
    assert "Likely cause: computation: inputs pass but outputs differ" in text
    assert "Torch functions called in it on the target: sigmoid, mul, half" in text
    assert "max_abs 0.0025, max_rel 0.0012, cosine 0.99999" in text
    assert "off by more than the pass tolerance 80%" in text
    assert "pass if at most 0.01% of elements are off by more than 0.01%" in text and "rtol 1.3e-06 atol 1e-05" in text
    assert "Net.blocks.1#0 (Gate, step 0): inputs fail" in text  # the calls that inherit the drift
    # the class body, marked at its definition line, and the ModuleList that constructs it ('blocks.0' -> 'blocks')
    assert "--- net.py:5-9: definition of Gate ---" in text and ">5: class Gate(nn.Module):" in text
    assert " 7:         if x.device.type == device.type:" in text
    assert "class Net" not in text.split("definition of Gate")[1].split("---")[0]
    assert "construction or call of 'blocks'" in text and "self.blocks = nn.ModuleList([Gate(), Gate()])" in text
    assert "What the migration changed in net.py" in text and "-        if x.is_cuda:" in text
    assert "tpx matmul precision 'highest'" in text and "Note: a note from compare" in text


def test_scalar_divergence_points_at_where_it_is_printed():
    loss = _output("scalar:loss", "scalar:loss", kind="scalar")
    div = Divergence(key="scalar:loss", module="scalar:loss", inputs="none", likely_cause="unknown",
                     explanation="no module output failed, but scalar:loss did", output=loss)
    src = "def main():\n    loss = step()\n    print(f'loss {loss:.4f}')\n"
    text = parity_evidence(_report(div), ["train.py"], {"train.py": src}.get)
    assert "probe key scalar:loss" in text and "where it is computed or printed of 'loss'" in text
    assert ">3:     print(f'loss {loss:.4f}')" in text


def test_unlocalised_failure_lists_failing_keys_and_unknown_source_is_said():
    loss = _output("scalar:loss", "scalar:loss", kind="scalar")
    text = parity_evidence(_report(None, [loss]), ["train.py"], {"train.py": "x = 1\n"}.get)
    assert "No first divergence was localised. Failing probe keys:" in text and "Failing tensor scalar:loss" in text
    div = _divergence().model_copy(update={"module_class": "Missing", "module": "Net"})
    text = parity_evidence(_report(div), ["train.py"], {"train.py": "x = 1\n"}.get)
    assert "(the source of Net could not be located; use search_repo)" in text
    assert attribute_name("Net.layers.3") == "layers" and attribute_name("Net") is None
    head = _divergence().model_copy(update={"module": "Net.head", "module_class": None})
    assert source_snippets(head, ["a.py"], {"a.py": "# self.head(x)\n"}.get) == []


def test_fixer_sends_the_parity_evidence_and_the_edits_already_tried(tmp_path):
    repo = tmp_path / "repo"
    repo.mkdir()
    (repo / "net.py").write_text(ORIGINAL)
    diag = Diagnosis(phase="parity", kind="parity_failed", message="parity failed; first divergence: Net.blocks.0#0",
                     parity=_report(_divergence()),
                     earlier_edits=["matmul_precision_highest at net.py:1 (policy): bf16 matmuls"])
    edit = {"path": "net.py", "search": "if x.device.type == device.type:", "replace": 'if x.device.type == "cuda":'}
    script = [scripted.reply(scripted.tool_call("apply_edit", edit),
                             scripted.tool_call("finish", {"summary": "s"}, "c2"))]

    def no_runs(*a):
        raise AssertionError("unexpected run")

    with scripted.ScriptedLLM(script) as server:
        session = EditSession(repo, repo, {"net.py": MIGRATED}, no_runs, None, "python net.py", None)
        client = ChatClient(LLMConfig(base_url=server.base_url, model="m", api_key="k"))
        run_fixer(client, session, diag, ["matmul_precision_highest@net.py:1"])
    prompt = server.requests[0]["body"]["messages"][1]["content"]
    assert prompt.startswith("The migrated program runs on tpx, but its numbers differ from the reference run")
    assert "probe key Net.blocks.0#0" in prompt and "definition of Gate" in prompt
    # the migration's own change to the file is derived from the original and the current text
    assert "-        if x.is_cuda:\n+        if x.device.type == device.type:" in prompt
    assert "Offline rules already applied: matmul_precision_highest@net.py:1" in prompt
    assert "- matmul_precision_highest at net.py:1 (policy): bf16 matmuls" in prompt
    assert session.files["net.py"] == MIGRATED.replace("if x.device.type == device.type:",
                                                       'if x.device.type == "cuda":')


def test_parity_evidence_has_the_table_and_the_divergent_calls_inputs_metrics():
    report = _report(_divergence())
    inp = _output("Net.blocks.0#0:in.0", "Net.blocks.0", kind="module_input").model_copy(
        update={"verdict": "pass", "tier": "assert_close", "metrics": TensorMetrics(
            numel=64, max_abs=1e-7, max_rel=2e-7, cosine=1.0, rmse=1e-8, nonfinite_mismatch=0, frac_over_pass_rel=0.0,
            frac_over_warn_rel=0.0, assert_close_ok=True)})
    report = report.model_copy(update={"tensors": [inp, _output("Net.blocks.0#0:out", "Net.blocks.0")]})
    text = parity_evidence(report, ["net.py"], {"net.py": MIGRATED}.get)
    assert "Parity table (module calls in execution order):" in text
    assert "> 0 Net.blocks.0#0 (Gate, step 0): inputs pass, outputs fail, max_abs 0.0025" in text
    assert "  1 Net.blocks.1#0 (Gate, step 0): inputs fail, outputs fail, max_abs 0.004" in text
    assert ("Input tensor Net.blocks.0#0:in.0 (float32 [8, 8] -> float32 on tpx:0): pass at the 'assert_close' "
            "check; max_abs 1e-07, max_rel 2e-07, cosine 1") in text
    assert "Output of the divergent call:\nFailing tensor Net.blocks.0#0:out" in text
    assert text.index("Inputs of the divergent call") < text.index("Output of the divergent call")
    # without recorded inputs the evidence says so rather than inventing figures
    bare = parity_evidence(_report(_divergence()), ["net.py"], {"net.py": MIGRATED}.get)
    assert "(no input tensor of Net.blocks.0#0 was recorded: inputs verdict pass)" in bare


def test_test_failures_are_shown_with_their_junit_outcomes(tmp_path):
    from agent.llm.evidence import test_evidence
    from tools.trace.models import TestOutcome

    tests = [TestOutcome(nodeid="tests/test_net.py::test_close", outcome="failed", file="tests/test_net.py", line=7,
                         message="AssertionError: Tensor-likes are not close!\nGreatest relative difference: 0.4"),
             TestOutcome(nodeid="tests/test_net.py::test_shape", outcome="passed")]
    text = test_evidence(tests)
    assert text.startswith("Failing tests (junit: 1 failed, 1 passed of 2):")
    assert "- tests/test_net.py::test_close: failed at tests/test_net.py:7" in text
    assert "Greatest relative difference: 0.4" in text and "test_shape" not in text
    assert test_evidence(tests[1:]) == ""
    # the fixer's prompt for a test failure carries them
    repo = tmp_path / "repo"
    repo.mkdir()
    (repo / "net.py").write_text(ORIGINAL)
    diag = Diagnosis(phase="test", kind="other", exc_type="AssertionError", message="Tensor-likes are not close!",
                     tests=tests)
    script = [scripted.reply(scripted.tool_call("apply_edit", {"path": "net.py", "search": "if x.is_cuda:",
                                                               "replace": "if False:"}),
                             scripted.tool_call("finish", {"summary": "s"}, "c2"))]
    with scripted.ScriptedLLM(script) as server:
        session = EditSession(repo, repo, {}, lambda *a: None, None, "python net.py", "pytest")
        run_fixer(ChatClient(LLMConfig(base_url=server.base_url, model="m", api_key="k")), session, diag, [])
    prompt = server.requests[0]["body"]["messages"][1]["content"]
    assert "Phase: test" in prompt and "- tests/test_net.py::test_close: failed at tests/test_net.py:7" in prompt
