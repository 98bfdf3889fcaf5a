"""Mapping tables (data only): CUDA API -> device-generic replacement or report text.

Templates: ``{device}`` is the module's device variable, ``{device_type}`` its ``.type``.
"""

from __future__ import annotations

from dataclasses import dataclass

from tools.codemods.base import Category
from tools.redirect.tables import FACTORIES


@dataclass(frozen=True)
class CallMapping:
    target: str
    prefix: tuple[str, ...] = ()
    needs_device: bool = False
    drop_args: bool = False
    #: when set, the site is reported for review with this message instead of rewritten
    review: str | None = None
    #: keyword arguments the target does not accept: their presence makes the site review
    reject_kwargs: tuple[str, ...] = ()
    #: the rewrite adds keyword arguments, so positional ones would become invalid
    no_positional: bool = False
    #: what the CUDA call gives on a machine without a GPU (an expression): the rewrite gives the same
    #: where no accelerator is (``(target(args) if torch.accelerator.is_available() else <absent>)``),
    #: since the target raises there; None: the target behaves as the CUDA call does without a GPU
    absent: str | None = None


@dataclass(frozen=True)
class Report:
    message: str
    suggestion: str | None = None
    category: Category | None = None


def _prefixed(names: dict[str, CallMapping], *modules: str) -> dict[str, CallMapping]:
    out: dict[str, CallMapping] = {}
    for key, value in names.items():
        for mod in modules:
            out[f"{mod}.{key}"] = value
    return out


# 9. runtime queries
AVAILABILITY_CALLS = _prefixed({
    "is_available": CallMapping("torch.accelerator.is_available"),
    "device_count": CallMapping("torch.accelerator.device_count"),
}, "torch.cuda")

# 10. device index
DEVICE_INDEX_CALLS = _prefixed({
    "set_device": CallMapping("torch.accelerator.set_device_index"),
    "current_device": CallMapping("torch.accelerator.current_device_index"),
}, "torch.cuda")

# 11. device context
DEVICE_CONTEXT_CALLS = {"torch.cuda.device": CallMapping("torch.accelerator.device_index")}

# 12. device properties
DEVICE_PROPERTY_CALLS = _prefixed({
    "get_device_name": CallMapping("torch.get_device_module({device}).get_device_name", needs_device=True),
    "get_device_properties": CallMapping("torch.get_device_module({device}).get_device_properties",
                                         needs_device=True),
    # its comparisons with a CUDA capability are FRY012's capability branches (tools/codemods/capability.py)
    "get_device_capability": CallMapping("torch.get_device_module({device}).get_device_capability",
                                         needs_device=True),
}, "torch.cuda")
CAPABILITY_CALLS = frozenset({"torch.cuda.get_device_capability"})

# 13. synchronize (the device module's synchronize also works on CPU)
SYNC_CALLS = {"torch.cuda.synchronize": CallMapping("torch.get_device_module({device}).synchronize",
                                                    needs_device=True)}

# 14. memory statistics: torch.accelerator's raise "Cannot access accelerator device when none is
# available" where torch.cuda's answer 0 / {} / nothing (docs/codemods.md, "Runtime queries without an
# accelerator"): the counters read 0 and the resets do nothing there, as the CUDA redirect's do
_MEMORY: dict[str, str] = {
    "memory_allocated": "0", "max_memory_allocated": "0", "memory_reserved": "0", "max_memory_reserved": "0",
    "memory_stats": "{}", "empty_cache": "None",
    # torch.cuda's raise without a GPU (no CUDA runtime to reset); there is nothing to reset either
    "reset_peak_memory_stats": "None", "reset_accumulated_memory_stats": "None",
}
MEMORY_CALLS = _prefixed({n: CallMapping(f"torch.accelerator.{n}", absent=absent) for n, absent in _MEMORY.items()},
                         "torch.cuda", "torch.cuda.memory")

# 15. free/total memory
MEM_INFO_CALLS = _prefixed({"mem_get_info": CallMapping("torch.accelerator.get_memory_info")},
                           "torch.cuda", "torch.cuda.memory")

# 16. allocator internals
ALLOCATOR_NAMES = {
    **{f"{m}.{n}": Report(f"torch.cuda {n} is specific to the CUDA caching allocator",
                          "drop it, or guard with `if device.type == \"cuda\":`")
       for m in ("torch.cuda", "torch.cuda.memory")
       for n in ("memory_snapshot", "_record_memory_history", "_dump_snapshot", "memory_summary",
                 "set_per_process_memory_fraction", "caching_allocator_alloc", "caching_allocator_delete",
                 "CUDAPluggableAllocator", "change_current_allocator")},
}

# 17. CUDA environment variables (Python string literals, shell scripts, Dockerfiles, Makefiles,
# .env files, YAML job configs): variable -> (why it does nothing off CUDA, what to use instead)
@dataclass(frozen=True)
class EnvVar:
    reason: str
    equivalent: str


_NCCL = EnvVar("configures NCCL, which runs only on CUDA GPUs",
               "drop it: torch.distributed picks the device's collective backend (tpxgloo on tpx, gloo on CPU), "
               "which reads GLOO_* settings")
_TORCH_NCCL = EnvVar("configures PyTorch's NCCL process group, which runs only on CUDA GPUs",
                     "drop it; bound collective waits with init_process_group(timeout=...) instead")
_ALLOC = EnvVar("configures PyTorch's CUDA caching allocator (expandable_segments, max_split_size_mb, ...)",
                "drop it for tpx/CPU; tpx's device memory size is TPX_MEMORY_CAPACITY (e.g. 16GiB)")
CUDA_ENV_VARS: dict[str, EnvVar] = {
    "CUDA_VISIBLE_DEVICES": EnvVar(
        "selects which NVIDIA GPUs the process sees",
        "TPX_DEVICE_COUNT sets how many tpx devices exist; pick one in code with "
        "torch.accelerator.set_device_index(i)"),
    "NVIDIA_VISIBLE_DEVICES": EnvVar("exposes NVIDIA GPUs to a container (NVIDIA container toolkit)",
                                     "drop it for tpx/CPU containers"),
    "NVIDIA_DRIVER_CAPABILITIES": EnvVar("selects NVIDIA driver libraries mounted into a container",
                                         "drop it for tpx/CPU containers"),
    "CUDA_DEVICE_ORDER": EnvVar("orders NVIDIA GPUs (PCI bus id or fastest first)", "drop it"),
    "PYTORCH_CUDA_ALLOC_CONF": _ALLOC,
    "PYTORCH_ALLOC_CONF": _ALLOC,
    "PYTORCH_NO_CUDA_MEMORY_CACHING": _ALLOC,
    "CUDA_LAUNCH_BLOCKING": EnvVar(
        "makes CUDA kernel launches synchronous (debugging)",
        "drop it: tpx kernels are already synchronous; TPX_STRICT=1 makes ops without a tpx kernel raise "
        "instead of falling back to CPU"),
    "CUBLAS_WORKSPACE_CONFIG": EnvVar("makes cuBLAS deterministic (with torch.use_deterministic_algorithms)",
                                      "drop it; torch.use_deterministic_algorithms(True) covers the target"),
    "NVIDIA_TF32_OVERRIDE": EnvVar("forces TF32 math on or off inside NVIDIA libraries",
                                   'torch.set_float32_matmul_precision("highest"/"high"); for tpx also '
                                   "TPX_MATMUL_PRECISION=highest"),
    "CUDA_MODULE_LOADING": EnvVar("controls lazy loading of CUDA kernels", "drop it"),
    "CUDNN_LOGINFO_DBG": EnvVar("turns on cuDNN API logging", "drop it; use torch.profiler for op traces"),
    "CUDNN_LOGDEST_DBG": EnvVar("sets where cuDNN API logs go", "drop it; use torch.profiler for op traces"),
    "CUDA_HOME": EnvVar("locates the CUDA toolkit to build CUDA extensions (see FRY044)",
                        "drop it once the extension is replaced by its PyTorch reference implementation"),
    "TORCH_CUDA_ARCH_LIST": EnvVar("selects GPU architectures to compile CUDA extensions for (see FRY044)",
                                   "drop it once the extension is replaced by its PyTorch reference "
                                   "implementation"),
    "NCCL_DEBUG": EnvVar("turns on NCCL logging (NCCL runs only on CUDA GPUs)",
                         "TORCH_DISTRIBUTED_DEBUG=DETAIL for torch.distributed logs on any backend"),
    "NCCL_SOCKET_IFNAME": EnvVar("selects NCCL's network interface (NCCL runs only on CUDA GPUs)",
                                 "GLOO_SOCKET_IFNAME (gloo and tpxgloo read it)"),
    "NCCL_P2P_DISABLE": _NCCL,
    "NCCL_IB_DISABLE": _NCCL,
    "TORCH_NCCL_ASYNC_ERROR_HANDLING": _TORCH_NCCL,
}
#: every other variable with one of these prefixes is reported with the family's entry
CUDA_ENV_PREFIXES: dict[str, EnvVar] = {"NCCL_": _NCCL, "TORCH_NCCL_": _TORCH_NCCL}


def cuda_env_var(name: str) -> EnvVar | None:
    """The table entry for an environment variable name, or None when it is not CUDA-specific."""
    entry = CUDA_ENV_VARS.get(name)
    if entry is not None:
        return entry
    for prefix, family in CUDA_ENV_PREFIXES.items():
        if name.startswith(prefix) and len(name) > len(prefix):
            return family
    return None


# 18. streams
STREAM_CALLS = {
    "torch.cuda.Stream": CallMapping("torch.Stream", prefix=("device={device}",), needs_device=True,
                                     no_positional=True),
    "torch.cuda.streams.Stream": CallMapping("torch.Stream", prefix=("device={device}",), needs_device=True,
                                             no_positional=True),
    "torch.cuda.current_stream": CallMapping("torch.get_device_module({device}).current_stream",
                                             needs_device=True),
    "torch.cuda.stream": CallMapping("torch.get_device_module({device}).stream", needs_device=True),
}

# 19. events
EVENT_CALLS = {
    "torch.cuda.Event": CallMapping("torch.Event", prefix=("device={device}",), needs_device=True,
                                    no_positional=True),
    "torch.cuda.streams.Event": CallMapping("torch.Event", prefix=("device={device}",), needs_device=True,
                                            no_positional=True),
}

# 20. stream internals
STREAM_REVIEW_NAMES = {
    "torch.cuda.ExternalStream": Report("ExternalStream wraps a raw CUDA stream pointer",
                                        "create a torch.Stream(device=device) instead"),
    "torch.cuda.default_stream": Report("default_stream is a CUDA stream API",
                                        "torch.get_device_module(device).current_stream()"),
    "torch.cuda.set_stream": Report("set_stream takes a torch.cuda.Stream", "torch.accelerator.set_stream(s)"),
}

# 21. CUDA graphs
GRAPH_NAMES = {
    f"torch.cuda.{n}": Report(f"torch.cuda.{n} referenced other than in a call (calls go to the device module, "
                              "whose graphs tpx replays eagerly)",
                              f"torch.get_device_module(device).{n.rsplit('.', 1)[-1]}", "review")
    for n in ("CUDAGraph", "graph", "make_graphed_callables", "graphs.CUDAGraph", "graphs.graph",
              "graphs.make_graphed_callables", "graph_pool_handle")
}
#: their calls -> the device module's (torch.cuda's on CUDA; tpx replays a capture eagerly: backend/graphs.py)
GRAPH_CALLS = {
    f"torch.cuda.{n}": CallMapping(f"torch.get_device_module({{device}}).{n.rsplit('.', 1)[-1]}", needs_device=True)
    for n in ("CUDAGraph", "graph", "make_graphed_callables", "graphs.CUDAGraph", "graphs.graph",
              "graphs.make_graphed_callables", "graph_pool_handle", "is_current_stream_capturing")
}

# 22. seeding
SEED_CALLS = _prefixed({
    "manual_seed": CallMapping("torch.manual_seed"),
    "manual_seed_all": CallMapping("torch.manual_seed"),
    "seed": CallMapping("torch.seed"),
    "seed_all": CallMapping("torch.seed"),
}, "torch.cuda", "torch.cuda.random")

# 23. RNG state
RNG_STATE_CALLS = _prefixed({
    n: CallMapping(f"torch.get_device_module({{device}}).{n}", needs_device=True)
    for n in ("get_rng_state", "set_rng_state", "get_rng_state_all", "set_rng_state_all", "initial_seed")
}, "torch.cuda", "torch.cuda.random")

# 24-26. AMP
AUTOCAST_CUDA = frozenset({"torch.cuda.amp.autocast", "torch.cuda.amp.autocast_mode.autocast",
                           "torch.cuda.autocast"})
AUTOCAST_GENERIC = frozenset({"torch.autocast", "torch.amp.autocast", "torch.amp.autocast_mode.autocast"})
GRADSCALER_CUDA = frozenset({"torch.cuda.amp.GradScaler", "torch.cuda.amp.grad_scaler.GradScaler"})
GRADSCALER_GENERIC = frozenset({"torch.amp.GradScaler", "torch.amp.grad_scaler.GradScaler", "torch.GradScaler"})
CUSTOM_AUTOGRAD_CUDA = {
    "torch.cuda.amp.custom_fwd": "torch.amp.custom_fwd", "torch.cuda.amp.custom_bwd": "torch.amp.custom_bwd",
}

# 27. autocast state
AUTOCAST_STATE_CALLS = {
    "torch.get_autocast_gpu_dtype": CallMapping("torch.get_autocast_dtype", prefix=("{device_type}",),
                                                needs_device=True),
    "torch.set_autocast_gpu_dtype": CallMapping("torch.set_autocast_dtype", prefix=("{device_type}",),
                                                needs_device=True),
    "torch.is_autocast_enabled": CallMapping("torch.is_autocast_enabled", prefix=("{device_type}",),
                                             needs_device=True),
}
# 57. bf16 support asked of CUDA -> asked of the target's device module (torch.cpu has no
# is_bf16_supported; CPU computes bfloat16, and CPU autocast defaults to it)
BF16_SUPPORTED = frozenset({"torch.cuda.is_bf16_supported"})

# 28/29. dtypes
HALF_DTYPES = frozenset({"torch.float16", "torch.half"})
DOUBLE_DTYPES = frozenset({"torch.float64", "torch.double"})
# 61. the program-wide default dtype
DEFAULT_DTYPE_SETTERS = frozenset({"torch.set_default_dtype"})

# 30. TF32
TF32_FLAGS = frozenset({"torch.backends.cuda.matmul.allow_tf32", "torch.backends.cudnn.allow_tf32"})
#: the TF32 flag of cuDNN convolutions: it does not govern matmuls (so it is no
#: set_float32_matmul_precision) and is harmless on other devices, so it is kept as written
CUDNN_TF32_FLAG = "torch.backends.cudnn.allow_tf32"

# 31. cuDNN flags
CUDNN_FLAG_NAMES = {
    "torch.backends.cudnn.benchmark": Report(
        "cudnn.benchmark only tunes cuDNN kernels; it has no effect on other devices",
        "drop it, or guard with `if device.type == \"cuda\":`"),
    "torch.backends.cudnn.deterministic": Report(
        "cudnn.deterministic only affects cuDNN", "torch.use_deterministic_algorithms(True)"),
    "torch.backends.cudnn.enabled": Report("cudnn.enabled only affects cuDNN", "drop it off CUDA"),
}

# 34/35/37. distributed
BARRIER = frozenset({"torch.distributed.barrier", "torch.distributed.distributed_c10d.barrier"})
INIT_PROCESS_GROUP = frozenset({"torch.distributed.init_process_group",
                                "torch.distributed.distributed_c10d.init_process_group"})
DDP = frozenset({"torch.nn.parallel.DistributedDataParallel", "torch.nn.parallel.distributed.DistributedDataParallel"})
DEVICE_MESH = frozenset({"torch.distributed.device_mesh.init_device_mesh", "torch.distributed.init_device_mesh",
                         # the older import paths of the tensor-parallel examples
                         "torch.distributed._tensor.device_mesh.init_device_mesh",
                         "torch.distributed._tensor.init_device_mesh",
                         "torch.distributed.tensor.device_mesh.init_device_mesh",
                         "torch.distributed.tensor.init_device_mesh"})

# 36. legacy data parallel
LEGACY_PARALLEL_NAMES = {
    "torch.nn.DataParallel": Report("nn.DataParallel is single-process multi-GPU (CUDA only)",
                                    "use the module directly, or native DistributedDataParallel"),
    "torch.nn.parallel.DataParallel": Report("nn.DataParallel is single-process multi-GPU (CUDA only)",
                                             "use the module directly, or native DistributedDataParallel"),
    "torch.nn.parallel.data_parallel.DataParallel": Report(
        "nn.DataParallel is single-process multi-GPU (CUDA only)", "use native DistributedDataParallel"),
    "torch.nn.SyncBatchNorm.convert_sync_batchnorm": Report(
        "SyncBatchNorm needs a process group with a collective backend for the device",
        "keep BatchNorm on a single device; use it only with a working process group"),
    "apex.parallel.DistributedDataParallel": Report("apex DDP is CUDA only",
                                                    "torch.nn.parallel.DistributedDataParallel"),
    "apex.parallel.convert_syncbn_model": Report("apex SyncBatchNorm is CUDA only",
                                                 "torch.nn.SyncBatchNorm.convert_sync_batchnorm"),
}

# 41. TorchScript
JIT_NAMES = {
    "torch.jit.script": Report("TorchScript runs eagerly on the target but is not compiled for it",
                               "drop @torch.jit.script, or use torch.compile"),
    "torch.jit.trace": Report("traced graphs record the device they were traced on",
                              "trace on the target device, or use torch.compile"),
}

# 42. profiler
PROFILER_CUDA_ACTIVITY = frozenset({"torch.profiler.ProfilerActivity.CUDA",
                                    "torch.autograd.profiler.ProfilerActivity.CUDA",
                                    "torch._C._profiler.ProfilerActivity.CUDA"})
PROFILER_CPU_ACTIVITY = frozenset({"torch.profiler.ProfilerActivity.CPU",
                                   "torch.autograd.profiler.ProfilerActivity.CPU",
                                   "torch._C._profiler.ProfilerActivity.CPU"})
PROFILER_SORT_KEYS = {"cuda_time_total": "device_time_total", "self_cuda_time_total": "self_device_time_total",
                      "cuda_time": "device_time", "self_cuda_memory_usage": "self_device_memory_usage",
                      "cuda_memory_usage": "device_memory_usage"}

# 43. NVTX / NVML
NVTX_NAMES = {
    **{f"torch.cuda.nvtx.{n}": Report("NVTX ranges exist only for NVIDIA tools",
                                      "torch.profiler.record_function(name)")
       for n in ("range_push", "range_pop", "range", "mark", "range_start", "range_end")},
    "torch.autograd.profiler.emit_nvtx": Report("emit_nvtx is NVIDIA-only", "torch.profiler.profile"),
}
NVTX_MODULES = {"pynvml": Report("pynvml queries NVIDIA drivers", "torch.accelerator memory APIs"),
                "nvidia_smi": Report("nvidia_smi queries NVIDIA drivers", "torch.accelerator memory APIs")}

# 44. C++/CUDA extensions
CPP_EXTENSION_NAMES = {
    "torch.utils.cpp_extension.CUDAExtension": Report(
        "CUDAExtension builds CUDA kernels that cannot run on tpx",
        "use the pure-PyTorch reference implementation of the op, or a CppExtension", "unsupported"),
}
CPP_EXTENSION_LOADERS = frozenset({"torch.utils.cpp_extension.load", "torch.utils.cpp_extension.load_inline"})

# 45. Triton
TRITON_NAMES = {f"triton.{n}": Report("Triton kernels compile for GPUs only",
                                      "fall back to the eager PyTorch implementation", "unsupported")
                for n in ("jit", "autotune", "heuristics")}
TRITON_MODULES = {"triton": Report("Triton kernels compile for GPUs only",
                                   "fall back to the eager PyTorch implementation", "unsupported")}

# 46. apex
APEX_CALLS = {
    **{name: CallMapping("torch.optim.AdamW", reject_kwargs=("bias_correction", "adam_w_mode", "set_grad_none",
                                                             "capturable", "master_weights"))
       for name in ("apex.optimizers.FusedAdam", "apex.optimizers.fused_adam.FusedAdam")},
    **{name: CallMapping("torch.nn.LayerNorm", reject_kwargs=("memory_efficient",))
       for name in ("apex.normalization.FusedLayerNorm", "apex.normalization.fused_layer_norm.FusedLayerNorm")},
    "apex.amp.initialize": CallMapping("torch.autocast", review="apex.amp is replaced by torch.amp: "
                                       "wrap the forward in torch.autocast(device.type) and use torch.amp.GradScaler"),
}

# 47. flash attention
FLASH_NAMES = {
    f"flash_attn.{n}": Report("flash_attn kernels are CUDA only",
                              "torch.nn.functional.scaled_dot_product_attention(q.transpose(1, 2), "
                              "k.transpose(1, 2), v.transpose(1, 2), is_causal=...).transpose(1, 2)")
    for n in ("flash_attn_func", "flash_attn_qkvpacked_func", "flash_attn_varlen_func",
              "flash_attn_interface.flash_attn_func")
}
FLASH_MODULES = {"flash_attn": Report("flash_attn kernels are CUDA only",
                                      "torch.nn.functional.scaled_dot_product_attention")}

# 48. CUDA-only libraries
CUDA_LIBRARY_MODULES = {
    mod: Report(f"{mod} runs on NVIDIA GPUs only", suggestion, "unsupported")
    for mod, suggestion in (
        ("bitsandbytes", "keep full-precision layers/optimizers (torch.optim.AdamW, nn.Linear)"),
        ("xformers", "torch.nn.functional.scaled_dot_product_attention"),
        ("cupy", "numpy on the host, or torch tensors on the device"),
        ("pycuda", "torch tensors and ops on the device"),
        ("numba.cuda", "numba.njit on the host, or torch ops on the device"),
    )
}

# 49. CUDA version/build checks
CUDA_VERSION_NAMES = {
    "torch.version.cuda": Report("torch.version.cuda is None off CUDA builds",
                                 "check torch.accelerator.current_accelerator() instead"),
    "torch.backends.cudnn.version": Report("cuDNN version checks are CUDA-only", "drop the check off CUDA"),
    "torch.backends.cudnn.is_available": Report("cuDNN availability is CUDA-only", "torch.accelerator.is_available()"),
    "torch.backends.cuda.is_built": Report("CUDA build checks are CUDA-only", "torch.accelerator.is_available()"),
    "torch.cuda.get_arch_list": Report("CUDA arch lists are CUDA-only", "drop the check off CUDA"),
    "torch.cuda.is_initialized": Report("CUDA init state is CUDA-only", "torch.accelerator.is_available()"),
    "torch.cuda.init": Report("CUDA init is CUDA-only", "drop it; devices initialise lazily"),
}

# 7. legacy typed tensor constructors
TENSOR_TYPES: dict[str, str] = {
    f"torch.cuda.{name}": f"torch.{dtype}"
    for name, dtype in (("FloatTensor", "float32"), ("DoubleTensor", "float64"), ("HalfTensor", "float16"),
                        ("BFloat16Tensor", "bfloat16"), ("LongTensor", "int64"), ("IntTensor", "int32"),
                        ("ShortTensor", "int16"), ("CharTensor", "int8"), ("ByteTensor", "uint8"),
                        ("BoolTensor", "bool"))
}

# calls whose device argument is a device TYPE string ("cuda"), handled by their own rules
DEVICE_TYPE_CALLS = AUTOCAST_GENERIC | GRADSCALER_GENERIC | DEVICE_MESH | frozenset(
    {"torch.amp.custom_fwd", "torch.amp.custom_bwd", "torch.get_autocast_dtype", "torch.is_autocast_enabled",
     "torch.set_autocast_dtype"})
DEVICE_OBJECT = frozenset({"torch.device"})
SET_DEFAULT_DEVICE = frozenset({"torch.set_default_device"})
TORCH_LOAD = frozenset({"torch.load", "torch.serialization.load"})
NEW_GROUP = frozenset({"torch.distributed.new_group", "torch.distributed.distributed_c10d.new_group"})
DATALOADER = frozenset({"torch.utils.data.DataLoader", "torch.utils.data.dataloader.DataLoader"})
TORCH_COMPILE = frozenset({"torch.compile"})
CUDA_GRAPH_COMPILE_MODES = frozenset({"max-autotune", "reduce-overhead"})

# Tensor factories: the one table the codemods (FRY050's host tensors, FRY051), the offline fix
# policy (agent.policy: device=/dtype= fixes through tools.codemods.fixes) and the runtime CUDA
# redirect use; its names live in tools.redirect.tables.FACTORIES, which the sandboxed child imports
# without libcst. Every name takes a ``device=`` keyword in torch 2.13 (tests/codemods/test_tables.py
# checks each against torch's schemas); without one the tensor is created on the host (or, for
# ``*_like``, where its input is).
DEVICE_FACTORIES = frozenset(f"torch.{n}" for n in FACTORIES)  # the names are the runtime redirect's table
#: the factories whose default device is their input's (``torch.zeros_like(x)`` is where ``x`` is)
LIKE_FACTORIES = frozenset(n for n in DEVICE_FACTORIES if n.endswith("_like"))
#: tensors made from host data that take no ``device=`` (always on the host)
HOST_DATA_TENSORS = frozenset({"torch.from_numpy", "torch.frombuffer"})
#: calls that create a tensor on the host unless told otherwise (FRY051: created, then moved every step)
TENSOR_FACTORIES = DEVICE_FACTORIES | HOST_DATA_TENSORS
SYNC_METHODS = frozenset({"item", "cpu", "numpy", "tolist"})


def _known_cuda_names() -> frozenset[str]:
    tables: list[object] = [
        AVAILABILITY_CALLS, DEVICE_INDEX_CALLS, DEVICE_CONTEXT_CALLS, DEVICE_PROPERTY_CALLS, SYNC_CALLS,
        MEMORY_CALLS, MEM_INFO_CALLS, ALLOCATOR_NAMES, STREAM_CALLS, EVENT_CALLS, STREAM_REVIEW_NAMES,
        GRAPH_NAMES, GRAPH_CALLS, SEED_CALLS, RNG_STATE_CALLS, AUTOCAST_CUDA, GRADSCALER_CUDA, CUSTOM_AUTOGRAD_CUDA,
        AUTOCAST_STATE_CALLS, BF16_SUPPORTED, NVTX_NAMES, CUDA_VERSION_NAMES, TENSOR_TYPES]
    names: set[str] = set()
    for table in tables:
        names.update(table)  # type: ignore[arg-type]
    return frozenset(n for n in names if n.startswith("torch.cuda."))


#: every torch.cuda.* name some rule handles; FRY049 reports the rest
KNOWN_CUDA_NAMES = _known_cuda_names()

# 50. text sinks that format a tensor (print(tensor) in a training loop is a host sync)
TEXT_BUILTINS = frozenset({"print", "str", "repr", "format"})
LOG_METHODS = frozenset({"debug", "info", "warning", "warn", "error", "critical", "exception", "log"})

# 56. SDPA backend selection: torch.backends.cuda.sdp_kernel's flags, in its own order (positional
# order and the order it lists the backends in), each with the SDPBackend it enables (default on)
SDP_KERNEL = frozenset({"torch.backends.cuda.sdp_kernel"})
FUNCTOOLS_PARTIAL = frozenset({"functools.partial"})
SDP_KERNEL_FLAGS: tuple[tuple[str, str], ...] = (
    ("enable_flash", "FLASH_ATTENTION"), ("enable_math", "MATH"),
    ("enable_mem_efficient", "EFFICIENT_ATTENTION"), ("enable_cudnn", "CUDNN_ATTENTION"))
#: the order sdp_kernel builds its backend list in (torch/backends/cuda/__init__.py, torch 2.13)
SDP_BACKEND_ORDER: tuple[str, ...] = ("enable_flash", "enable_mem_efficient", "enable_math", "enable_cudnn")
