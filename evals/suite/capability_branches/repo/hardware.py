"""What the GPU we run on can do, decided once at start-up."""

import torch


def amp_dtype() -> torch.dtype:
    """bf16 on Ampere (sm_80) and newer; older cards only have fast fp16 (with a GradScaler)."""
    major, _ = torch.cuda.get_device_capability()
    if major >= 8 and torch.cuda.is_bf16_supported():
        return torch.bfloat16
    return torch.float16


def fused_attention_ok() -> bool:
    """The fused SDPA kernels we rely on need sm_80+; older GPUs take the explicit softmax path."""
    return torch.cuda.get_device_capability(0) >= (8, 0)


def describe() -> str:
    name = torch.cuda.get_device_name(0)
    major, minor = torch.cuda.get_device_capability(0)
    props = torch.cuda.get_device_properties(0)
    return f"{name} (sm_{major}{minor}, {props.total_memory / 2**30:.1f} GiB)"
