"""``torch.compile`` for tpx: the Dynamo backend ``"tpx"``.

How a graph that touches tpx is compiled:

1. Dynamo hands us the captured FX graph. If it would create a float64 tensor on tpx, it is
   not compiled: it runs eagerly, so the tpx float64 rule raises exactly as in eager mode.
2. Inductor's ``compile_fx`` runs AOTAutograd on it with tpx fake tensors (so training
   works: the forward and the backward graphs are both compiled; autograd sees tpx tensors).
3. For each forward/backward/inference graph, our ``inner_compile`` retargets the graph to the
   CPU (device arguments ``tpx`` -> ``cpu``, fake tensors re-propagated on CPU), applies the
   tpx matmul-precision rule (float32 matmul inputs rounded to bfloat16 unless the precision
   is "highest", exactly like the eager kernels), and compiles it with Inductor's CPU code
   generation (C++/OpenMP kernels).
4. At run time the compiled graph gets zero-copy CPU views of the tpx inputs
   (``backend.bridge.to_cpu``) and its outputs are wrapped back as tpx tensors
   (``backend.bridge.from_cpu``): the whole graph runs in one go on the unwrapped storage,
   never op by op through the eager tpx kernels.

``torch.compile(model)`` with the default ``backend="inductor"`` on tpx tensors takes the same
route (Inductor has no tpx code generator of its own); CPU-only graphs are left to Inductor
untouched.
"""

from __future__ import annotations

import functools
import logging
import sys
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

import torch

logger = logging.getLogger(__name__)

DEVICE = "tpx"
BACKEND_NAME = "tpx"
# The row compiled-graph calls get in the tpx op statistics (torch.tpx op stats).
COMPILED_OP_NAME = "tpx::compiled_graph"

# float32 matmul-family ops whose tensor operands tpx rounds to bfloat16 (fp32 accumulation)
# unless the matmul precision is "highest". Values: indices of the operands that are rounded.
_MATMUL_OPERANDS: dict[str, tuple[int, ...]] = {
    "aten.mm.default": (0, 1),
    "aten.bmm.default": (0, 1),
    "aten.addmm.default": (1, 2),
    "aten.baddbmm.default": (1, 2),
    "aten.addmv.default": (1, 2),
    "aten.mv.default": (0, 1),
    "aten.dot.default": (0, 1),
    "aten.vdot.default": (0, 1),
    "aten.addbmm.default": (1, 2),
    "aten.convolution.default": (0, 1),
    # attention: tpx runs (and traces) the CPU's kernel choice, flash-attention-for-CPU
    "aten._scaled_dot_product_flash_attention_for_cpu.default": (0, 1, 2),
    "aten._scaled_dot_product_flash_attention_for_cpu_backward.default": (0, 1, 2, 3),
}

_lock = threading.Lock()
_stats = {"graphs_compiled": 0, "graphs_eager": 0, "compiled_calls": 0, "eager_calls": 0}


def compile_stats() -> dict[str, int]:
    """Counters of this module: graphs compiled, graphs left eager, compiled-graph calls."""
    with _lock:
        return dict(_stats)


def _bump(key: str, n: int = 1) -> None:
    with _lock:
        _stats[key] += n


# ---------------------------------------------------------------------------- registration


def register() -> None:
    """Make ``backend="tpx"`` available and route ``backend="inductor"`` on tpx tensors here.

    Cheap at import time: Dynamo is not imported. The name ``"tpx"`` is registered with Dynamo's
    registry the moment that module is imported (a one-shot import hook), or right away if it
    is already: never through the ``torch_dynamo_backends`` entry point, which would import
    ``backend.compile`` by its bare name, a second copy of this package (or the user's own
    ``backend``) in a process that loaded tpx under a private name.
    """
    _route_inductor_wrapper()
    if _REGISTRY in sys.modules:
        _register_with_dynamo()
    elif not any(isinstance(f, _RegistryHook) for f in sys.meta_path):
        sys.meta_path.insert(0, _RegistryHook())


_REGISTRY = "torch._dynamo.backends.registry"


class _RegistryHook:
    """Registers ``"tpx"`` right after Dynamo's backend registry module has run, then leaves
    ``sys.meta_path`` (a meta path finder that only wraps that one module's loader)."""

    def find_spec(self, name: str, path: Any = None, target: Any = None) -> Any:
        if name != _REGISTRY:
            return None
        if self in sys.meta_path:
            sys.meta_path.remove(self)
        import importlib.util

        spec = importlib.util.find_spec(name)
        loader = getattr(spec, "loader", None)
        if loader is None or not hasattr(loader, "exec_module"):
            return spec
        original = loader.exec_module

        def exec_module(module: Any) -> None:
            original(module)
            try:
                _register_with_dynamo()
            except Exception:  # never break torch._dynamo's import
                logger.warning("tpx: could not register the torch.compile backend", exc_info=True)

        loader.exec_module = exec_module
        return spec


def _register_with_dynamo() -> None:
    from torch._dynamo.backends import registry

    if BACKEND_NAME not in registry._COMPILER_FNS:
        registry.register_backend(compiler_fn=tpx_backend, name=BACKEND_NAME)


def _route_inductor_wrapper() -> None:
    wrapper_cls = getattr(torch, "_TorchCompileInductorWrapper", None)
    if wrapper_cls is None:  # pragma: no cover - torch is pinned; checked by tests
        logger.warning("torch._TorchCompileInductorWrapper not found: backend='inductor' on tpx is not routed")
        return
    original = wrapper_cls.__call__
    if getattr(original, "_tpx_routed", False):
        return

    @functools.wraps(original)
    def __call__(self: Any, model_: Any, inputs_: Any, *, config_patches: Any = None) -> Any:
        if isinstance(model_, torch.fx.GraphModule) and graph_touches_tpx(model_, inputs_):
            logger.info("backend='inductor' on tpx tensors: compiling through backend='tpx'")
            patches = {**self.config, **(config_patches or {})}
            return compile_tpx_graph(model_, inputs_, config_patches=patches)
        return original(self, model_, inputs_, config_patches=config_patches)

    __call__._tpx_routed = True  # type: ignore[attr-defined]
    wrapper_cls.__call__ = __call__


# ---------------------------------------------------------------------------- the backend


def tpx_backend(gm: torch.fx.GraphModule, example_inputs: Sequence[Any], **kwargs: Any) -> Callable[..., Any]:
    """The Dynamo backend ``"tpx"`` (``torch.compile(model, backend="tpx")``).

    Accepts ``options`` (a dict of Inductor config patches) and ``mode`` like
    ``torch.compile`` passes them to custom backends.
    """
    options = dict(kwargs.get("options") or {})
    mode = kwargs.get("mode")
    if mode not in (None, "default"):
        from torch._inductor import list_mode_options

        options = {**list_mode_options(mode), **options}
    if not graph_touches_tpx(gm, example_inputs):
        from torch._inductor.compile_fx import compile_fx

        return compile_fx(gm, example_inputs, config_patches=options or None)
    return compile_tpx_graph(gm, example_inputs, config_patches=options or None)


def compile_tpx_graph(
    gm: torch.fx.GraphModule, example_inputs: Sequence[Any], config_patches: dict[str, Any] | None = None
) -> Callable[..., Any]:
    """Compile a Dynamo graph that touches tpx (see the module docstring)."""
    reason = _eager_only_reason(gm, example_inputs)
    if reason is not None:
        logger.warning("tpx compile: graph left to eager execution: %s", reason)
        _bump("graphs_eager")
        return gm.forward

    from torch._functorch import config as functorch_config
    from torch._inductor.compile_fx import compile_fx

    # Our inner results wrap Inductor's: keep them out of the AOTAutograd cache.
    with functorch_config.patch(enable_autograd_cache=False, bundled_autograd_cache=False):
        compiled = compile_fx(gm, example_inputs, inner_compile=_tpx_inner_compile,
                              config_patches=config_patches or None)
    _bump("graphs_compiled")
    return compiled


# ---------------------------------------------------------------------------- graph checks


def _is_tpx_device(x: Any) -> bool:
    if isinstance(x, torch.device):
        return x.type == DEVICE
    if isinstance(x, str):
        return x == DEVICE or x.startswith(DEVICE + ":")
    return False


def _node_values(node: torch.fx.Node) -> list[Any]:
    val = node.meta.get("val", node.meta.get("example_value"))
    return [v for v in torch.utils._pytree.tree_leaves(val) if isinstance(v, torch.Tensor)]


def graph_touches_tpx(gm: torch.fx.GraphModule, example_inputs: Sequence[Any]) -> bool:
    """True if an input, a value, or a device argument of the graph is on tpx."""
    if any(isinstance(x, torch.Tensor) and x.device.type == DEVICE for x in example_inputs):
        return True
    for node in gm.graph.nodes:
        if any(t.device.type == DEVICE for t in _node_values(node)):
            return True
        if _args_name_tpx(node):
            return True
    return False


def _args_name_tpx(node: torch.fx.Node) -> bool:
    """True if an argument of ``node`` (nested in lists, tuples, dicts) names the tpx device."""
    found: list[Any] = []
    torch.fx.node.map_aggregate((node.args, node.kwargs), lambda a: found.append(a) if _is_tpx_device(a) else None)
    return bool(found)


def _eager_only_reason(gm: torch.fx.GraphModule, example_inputs: Sequence[Any]) -> str | None:
    """Why a Dynamo graph must run eagerly on tpx, or None."""
    for node in gm.graph.nodes:
        for t in _node_values(node):
            if t.device.type == DEVICE and t.dtype == torch.float64:
                return (f"{node.format_node()} makes a float64 tensor on tpx; running it eagerly so that "
                        "the tpx float64 rule applies as in eager mode")
    return None


# ---------------------------------------------------------------------------- inner compile


def _retarget_to_cpu(gm: torch.fx.GraphModule) -> None:
    """Replace every tpx device argument in the graph with the CPU, in place."""

    def swap(a: Any) -> Any:
        if isinstance(a, torch.device) and a.type == DEVICE:
            return torch.device("cpu")
        if isinstance(a, str) and _is_tpx_device(a):
            return "cpu"
        return a

    for node in gm.graph.nodes:
        node.args = torch.fx.node.map_aggregate(node.args, swap)
        node.kwargs = torch.fx.node.map_aggregate(node.kwargs, swap)
    gm.recompile()


def matmul_bf16() -> bool:
    """Whether tpx currently rounds float32 matmul operands to bfloat16 (its eager rule)."""
    from . import kernels

    kernels._refresh_matmul()
    return bool(kernels.S.matmul_bf16)


def _round_matmul_inputs(gm: torch.fx.GraphModule) -> int:
    """Insert bf16 rounding of float32 matmul operands, as the eager tpx kernels do."""
    prims = torch.ops.prims
    count = 0
    for node in list(gm.graph.nodes):
        if node.op != "call_function" or str(node.target) not in _MATMUL_OPERANDS:
            continue
        new_args = list(node.args)
        changed = False
        for i in _MATMUL_OPERANDS[str(node.target)]:
            arg = new_args[i] if i < len(new_args) else None
            if not isinstance(arg, torch.fx.Node):
                continue
            vals = _node_values(arg)
            if len(vals) != 1 or vals[0].dtype != torch.float32:
                continue
            with gm.graph.inserting_before(node):
                down = gm.graph.call_function(prims.convert_element_type.default, (arg, torch.bfloat16))
                up = gm.graph.call_function(prims.convert_element_type.default, (down, torch.float32))
            new_args[i] = up
            changed = True
        if changed:
            node.args = tuple(new_args)
            count += 1
    if count:
        gm.recompile()
    return count


def _cpu_fake(x: Any, fake_mode: Any) -> Any:
    if not isinstance(x, torch.Tensor) or x.device.type != DEVICE:
        return x
    with fake_mode:
        size, stride, offset = x.size(), x.stride(), x.storage_offset()
        if isinstance(offset, int) and offset == 0:
            out = torch.empty_strided(size, stride, dtype=x.dtype, device="cpu")
        else:
            extent = offset + 1 + sum((s - 1) * st for s, st in zip(size, stride, strict=True))
            out = torch.empty(extent, dtype=x.dtype, device="cpu").as_strided(size, stride, offset)
    return out


def _retag_values_to_cpu(gm: torch.fx.GraphModule, fake_mode: Any) -> None:
    """Give every node a CPU fake value with the traced sizes and strides.

    Values are not re-propagated through CPU meta kernels: those may pick other strides
    (e.g. channels-last outputs) than the ones the graph was traced and decomposed with, and
    the graph's views are only valid for the traced layout.
    """
    for node in gm.graph.nodes:
        for key in ("val", "example_value"):
            if key in node.meta:
                node.meta[key] = torch.utils._pytree.tree_map(lambda v: _cpu_fake(v, fake_mode), node.meta[key])


def _tpx_inner_compile(gm: torch.fx.GraphModule, example_inputs: Sequence[Any], **kwargs: Any) -> Any:
    from torch._guards import detect_fake_mode
    from torch._inductor.compile_fx import compile_fx_inner
    from torch._inductor.virtualized import V

    output_node = next(n for n in reversed(gm.graph.nodes) if n.op == "output")
    out_on_tpx = [
        isinstance(o, torch.fx.Node) and any(t.device.type == DEVICE for t in _node_values(o))
        for o in torch.utils._pytree.tree_leaves(output_node.args[0])
    ]
    fake_mode = detect_fake_mode(example_inputs) or V.fake_mode
    eager_gm = _copy_graph_module(gm)
    _retarget_to_cpu(gm)
    bf16 = matmul_bf16()
    rounded = _round_matmul_inputs(gm) if bf16 else 0
    cpu_inputs = [_cpu_fake(x, fake_mode) for x in example_inputs]
    _retag_values_to_cpu(gm, fake_mode)
    logger.debug("tpx inner compile: %d nodes, %d matmuls with bf16 operands, backward=%s",
                 len(gm.graph.nodes), rounded, kwargs.get("is_backward", False))
    from torch._inductor import config as inductor_config

    # Keep every explicit low-precision round trip (our bf16 operand rounding, autocast casts):
    # without this Inductor's C++ code generation elides fp32->bf16->fp32 and drifts from eager.
    with inductor_config.patch(emulate_precision_casts=True):
        inner = compile_fx_inner(gm, cpu_inputs, **kwargs)
    return _make_output_code(inner, out_on_tpx, bf16, eager_gm)


def _copy_graph_module(gm: torch.fx.GraphModule) -> torch.fx.GraphModule:
    """An independent copy of an AOT graph (metadata shared), kept for eager execution."""
    graph = torch.fx.Graph()
    out = graph.graph_copy(gm.graph, {})
    graph.output(out)
    return torch.fx.GraphModule(gm, graph)


# ---------------------------------------------------------------------------- runtime wrapper


def _make_output_code(inner: Any, out_on_tpx: list[bool], bf16: bool, eager_gm: torch.fx.GraphModule) -> Any:
    from torch._inductor.output_code import OutputCode

    class TpxOutputCode(OutputCode):
        """Runs an Inductor CPU graph on the CPU views of tpx inputs; outputs become tpx."""

        def __init__(self) -> None:
            self._boxed_call = True  # instance attribute: survives functools.wraps (copies __dict__)
            self.inner = inner
            self.out_on_tpx = out_on_tpx
            self.bf16 = bf16
            self.eager_gm = eager_gm
            self.warned = False

        def __call__(self, inputs: list[Any]) -> Any:
            from . import _ext

            if matmul_bf16() != self.bf16:
                # tpx's own precision setting changed without a Dynamo recompile (Dynamo guards
                # torch's setting only): keep eager semantics by running this graph op by op.
                if not self.warned:
                    self.warned = True
                    logger.warning("tpx: matmul precision changed since this graph was compiled; running it "
                                   "eagerly (call torch.compiler.reset() to recompile)")
                _bump("eager_calls")
                args = list(inputs)
                inputs.clear()
                return self.eager_gm(*args)
            t0 = time.perf_counter_ns()
            ext = _ext.get()  # zero-copy CPU views in, tpx tensors out (backend.bridge, per list)
            # outputs go to the inputs' device (tpx:1 in, tpx:1 out), else the current one
            index = next((x.get_device() for x in inputs
                          if isinstance(x, torch.Tensor) and x.device.type == DEVICE), -1)
            args = ext.to_cpu_list(inputs)
            inputs.clear()
            _IN_GRAPH.depth = getattr(_IN_GRAPH, "depth", 0) + 1
            try:
                outs = self.inner(args)
            finally:
                _IN_GRAPH.depth -= 1
            result = ext.from_cpu_list(outs, self.out_on_tpx, index)
            _record_call(time.perf_counter_ns() - t0)
            return result

        def post_compile(self, example_inputs: Sequence[Any], constants: Any, graph_kwargs: Any) -> None:
            self.inner.post_compile(example_inputs, constants, graph_kwargs)

        def prepare_for_serialization(self) -> None:
            raise NotImplementedError("tpx compiled graphs are not serialized")

        def set_triton_bundle(self, triton_bundle: Any) -> None:
            pass

    return TpxOutputCode()


_IN_GRAPH = threading.local()  # depth of tpx compiled graphs running on this thread


def in_compiled_graph() -> bool:
    """Whether this thread is running a tpx compiled graph now: the aten ops seen meanwhile (Inductor's
    extern kernels, such as ``aten::mm``) run on the CPU views of tpx tensors, as part of tpx's work
    (the profiler's device-op counter counts them as tpx ops)."""
    return getattr(_IN_GRAPH, "depth", 0) > 0


def _record_call(ns: int) -> None:
    """Count a compiled-graph call, here and in the tpx op statistics (one row for all graphs)."""
    _bump("compiled_calls")
    from . import stats

    stats.record_op(COMPILED_OP_NAME, ns)
