"""First-divergence localisation and the likely op class responsible (tables as data)."""

from __future__ import annotations

from typing import Any

from tools.parity.drift import budget
from tools.parity.models import Divergence, DriftSummary, LikelyCause, ModuleComparison, TensorComparison
from tools.probe.dump import ProbeDump
from tools.probe.results import FINAL_KIND, RESULT_KINDS, SAVED_KIND

MATMUL_MODULES = {
    "Linear", "LazyLinear", "Bilinear", "Conv1d", "Conv2d", "Conv3d", "ConvTranspose1d", "ConvTranspose2d",
    "ConvTranspose3d", "LazyConv1d", "LazyConv2d", "LazyConv3d", "MultiheadAttention", "Embedding",
    "TransformerEncoderLayer", "TransformerDecoderLayer", "LSTM", "GRU", "RNN",
}
MATMUL_OPS = {
    "linear", "matmul", "mm", "bmm", "addmm", "baddbmm", "addbmm", "addmv", "mv", "dot", "einsum", "tensordot",
    "__matmul__", "__rmatmul__", "conv1d", "conv2d", "conv3d", "conv_transpose1d", "conv_transpose2d",
    "conv_transpose3d", "bilinear", "scaled_dot_product_attention", "multi_head_attention_forward", "_convolution",
    "convolution", "lstm", "gru", "rnn_tanh", "rnn_relu",
}
REDUCTION_OPS = {
    "sum", "mean", "softmax", "log_softmax", "layer_norm", "batch_norm", "group_norm", "instance_norm", "rms_norm",
    "norm", "var", "std", "var_mean", "std_mean", "cumsum", "cumprod", "logsumexp", "cross_entropy", "nll_loss",
    "mse_loss", "l1_loss", "prod", "nansum", "nanmean", "kl_div", "binary_cross_entropy",
    "binary_cross_entropy_with_logits", "_softmax", "_log_softmax", "native_layer_norm",
}
REDUCTION_MODULES = {"LayerNorm", "BatchNorm1d", "BatchNorm2d", "BatchNorm3d", "GroupNorm", "RMSNorm", "Softmax",
                     "LogSoftmax", "CrossEntropyLoss", "MSELoss", "NLLLoss", "InstanceNorm1d", "InstanceNorm2d"}
# Matmul precision settings that mean "inputs rounded to bf16/tf32" (torch and tpx spellings).
REDUCED_MATMUL = {"medium", "high", "bf16", "bfloat16", "tf32", "reduced", "fast"}
# A max relative error this small on a reduction-heavy module is what summation order changes give.
REDUCTION_NOISE_COSINE = 0.9999
MAX_DIVERGENCE_OPS = 200
RESULT_WHAT = {SAVED_KIND: "a tensor the program saved", FINAL_KIND: "a top-level tensor at the program's exit"}


def _op_base(name: str) -> str:
    """'aten::addmm.default' / 'aten.addmm' / 'addmm' -> 'addmm'."""
    name = name.split("::")[-1]
    if name.startswith("aten."):
        name = name[5:]
    return name.split(".")[0]


def matmul_precision(meta: dict[str, Any], device: str | None = None) -> str | None:
    """The effective matmul precision where the module ran: on tpx, tpx's own (effective) setting,
    then TPX_MATMUL_PRECISION; elsewhere torch.get_float32_matmul_precision()."""
    on_tpx = device is None or device.startswith(("tpx", "privateuseone"))
    if on_tpx:
        tpx = meta.get("tpx") or {}
        if tpx.get("matmul_precision") and str(tpx["matmul_precision"]).lower() != "auto":
            return str(tpx["matmul_precision"]).lower()
        env = meta.get("final_env") or meta.get("env") or {}
        if env.get("TPX_MATMUL_PRECISION", "auto").lower() != "auto":
            return str(env["TPX_MATMUL_PRECISION"]).lower()
    value = meta.get("final_matmul_precision") or meta.get("matmul_precision")
    return str(value).lower() if value else None


def fallback_ops(meta: dict[str, Any]) -> set[str]:
    tpx = meta.get("tpx") or {}
    return {_op_base(o) for o in tpx.get("fallback_ops", [])}


def _module_ops(dump: ProbeDump, module: str) -> list[str]:
    """Torch functions called directly in ``module`` or in modules nested under it."""
    ops: dict[str, None] = {}  # first-seen order; the dump (a run's) may name any number of ops
    for path, names in dump.module_ops.items():
        if path == module or path.startswith(module + "."):
            ops.update(dict.fromkeys(names))
    return list(ops)


def attribute(div_module: str, module_class: str | None, output: TensorComparison, tgt: ProbeDump,
              inputs_verdict: str) -> tuple[LikelyCause, str, list[str]]:
    """(likely_cause, explanation, ops) for the module where drift was born."""
    every_op = _module_ops(tgt, div_module)
    bases = {_op_base(o) for o in every_op}
    ops = every_op[:MAX_DIVERGENCE_OPS]  # what the divergence lists (the attribution used them all)
    classes = {c for p, c in tgt.module_classes.items() if p == div_module or p.startswith(div_module + ".")}
    if module_class:
        classes.add(module_class)
    if output.tier == "dtype":
        return ("dtype", f"output dtype differs ({output.ref_dtype} on the reference, {output.target_dtype} on the "
                "target): a dtype was changed (e.g. float64 mapped to float32, or autocast); cast explicitly "
                "or keep that computation on CPU", ops)
    fb = fallback_ops(tgt.meta) & bases
    if fb:
        named = sorted(fb)[:20]
        more = f" and {len(fb) - len(named)} more" if len(fb) > len(named) else ""
        return ("cpu_fallback", f"op(s) {', '.join(named)}{more} ran as CPU fallbacks on the target inside this "
                "module; a fallback computes with a different kernel (and costs a round trip)", ops)
    has_matmul = bool(bases & MATMUL_OPS) or bool(classes & MATMUL_MODULES)
    precision = matmul_precision(tgt.meta, output.target_device)
    if has_matmul and precision in REDUCED_MATMUL:
        matmuls = ", ".join(sorted((bases & MATMUL_OPS) or classes & MATMUL_MODULES))
        return ("matmul_precision", f"the module runs matmul-class ops ({matmuls}) "
                f"and the target ran with reduced matmul precision '{precision}' (bf16/tf32 inputs); set "
                "torch.set_float32_matmul_precision('highest') (or TPX_MATMUL_PRECISION=highest) to confirm", ops)
    cos = output.metrics.cosine if output.metrics else 0.0
    has_reduction = bool(bases & REDUCTION_OPS) or bool(classes & REDUCTION_MODULES)
    if has_reduction and cos >= REDUCTION_NOISE_COSINE:
        return ("reduction_order", f"small differences (cosine {cos:.6f}) in a module with reductions "
                f"({', '.join(sorted(bases & REDUCTION_OPS) or sorted(classes & REDUCTION_MODULES))}): "
                "summation order differs between the kernels", ops)
    if output.tier in ("shape", "nonfinite", "missing"):
        return ("computation", f"{output.reason}; the module computes something different on the target", ops)
    return ("computation", f"inputs {inputs_verdict} but outputs differ well beyond precision effects "
            f"(cosine {cos:.6f}, max abs {output.metrics.max_abs if output.metrics else float('nan'):.3g}): "
            "the module's own computation differs (its weights, an op's semantics, or a bug)", ops)


def _beyond_budget(failing: TensorComparison, step: int, drift: DriftSummary | None) -> str:
    """Why a later step's failure is not drift: its error against the budget it was given."""
    if drift is None or drift.step0_failed or failing.metrics is None or failing.metrics.rel_l2 is None:
        return ""
    allowed = budget(drift.e0, failing.target_dtype or failing.ref_dtype, step)
    return (f"; not drift: its relative error {failing.metrics.rel_l2:.3g} is beyond the drift budget of step {step} "
            f"({allowed:.3g}, from the step-0 error {drift.e0:.2g})")


def first_divergence(modules: list[ModuleComparison], tensors: list[TensorComparison],
                     scalars: list[TensorComparison], ref: ProbeDump, tgt: ProbeDump,
                     drift: DriftSummary | None = None) -> Divergence | None:
    """The FIRST module call (completion order) whose outputs fail while its inputs pass."""
    outputs: dict[tuple[str, int], list[TensorComparison]] = {}
    for t in tensors:
        if t.kind == "module_output" and t.module is not None and t.call is not None:
            outputs.setdefault((t.module, t.call), []).append(t)
    inherited: ModuleComparison | None = None
    for m in modules:
        if m.output_verdict != "fail":
            continue
        if m.input_verdict == "fail":
            inherited = inherited or m
            continue
        failing = next(t for t in outputs.get((m.module, m.call), []) if t.verdict == "fail")
        cause, why, ops = attribute(m.module, m.module_class, failing, tgt, m.input_verdict)
        if m.step and all(x.output_verdict != "fail" for x in modules if x.step == 0):
            why += ("; every step-0 module call matched, so the drift entered through the parameters "
                    "(backward pass or optimizer update of the step before)") + _beyond_budget(failing, m.step, drift)
        return Divergence(key=m.key, module=m.module, call=m.call, step=m.step, module_class=m.module_class,
                          inputs=m.input_verdict, likely_cause=cause, explanation=why, ops=ops, output=failing)
    if inherited is not None:
        failing = next(t for t in outputs.get((inherited.module, inherited.call), []) if t.verdict == "fail")
        if failing.tier == "dtype":
            cause, why = "dtype", (f"the data entering the model already has another dtype ({failing.ref_dtype} on the "
                                   f"reference, {failing.target_dtype} on the target): a dtype was changed before "
                                   "the first module (e.g. .double() or a float64 default); cast explicitly")
        else:
            cause, why = "input_data", ("the inputs of the first failing module already differ and no earlier "
                                        "module produced them: the data differs (data loading, RNG, preprocessing "
                                        "outside modules)")
        return Divergence(key=inherited.key, module=inherited.module, call=inherited.call, step=inherited.step,
                          module_class=inherited.module_class, inputs="fail", likely_cause=cause,
                          explanation=why, output=failing)
    # then what the program computed outside modules, in the order it happened: a skipped or added optimizer
    # step, records and saved files (run order), the final top-level tensors (at exit), the printed scalars
    later = [x for x in tensors if x.kind == "step_count"] + [x for x in tensors if x.kind in ("record", *RESULT_KINDS)]
    for t in later + scalars:
        if t.verdict == "fail":
            what = f"{t.key} ({RESULT_WHAT[t.kind]})" if t.kind in RESULT_WHAT else t.key
            return Divergence(key=t.key, module=t.module or t.key, call=t.call, inputs="none",
                              likely_cause="dtype" if t.tier == "dtype" else "unknown",
                              explanation=f"no module output failed, but {what} did: {t.reason}", output=t)
    return None
