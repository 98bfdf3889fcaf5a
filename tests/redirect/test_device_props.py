"""The redirect's ``torch.cuda.get_device_properties``: every field PyTorch itself reads from CUDA's."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import torch

from tools.redirect.cuda_api import build_cuda_api
from tools.redirect.sites import SiteCounter

TORCH_DIR = Path(torch.__file__).resolve().parent
# A call that returns CUDA's properties (torch.cuda's, or Dynamo's device interface, which is torch.cuda's
# on a CUDA device); torch.xpu's / torch.mtia's and Triton's driver dictionary are other structures.
_CALL = r"(?<![\w.])(?:torch\.cuda\.|cuda\.|device_interface\.(?:Worker\.)?)?get_device_properties\("
_ARGS = r"[^()]*(?:\([^()]*\)[^()]*)*\)"
_DIRECT = re.compile(_CALL + _ARGS + r"\s*\.\s*(\w+)")
_ASSIGN = re.compile(r"(?:^[ \t]*|\()(\w+)\s*(?::[^=\n]+)?:?=\s*" + _CALL, re.M)
# Fields read only where the device is an XPU (read in `elif torch.xpu...` / `device_type == "xpu"`
# branches of the same functions): not CUDA's.
XPU_ONLY = {"gpu_subslice_count", "architecture", "has_fp64", "local_mem_size"}


def _torch_reads() -> dict[str, set[str]]:
    """attribute -> the torch source files that read it from a CUDA properties object."""
    found: dict[str, set[str]] = {}
    for path in TORCH_DIR.rglob("*.py"):
        rel = path.relative_to(TORCH_DIR).as_posix()
        if rel.startswith(("testing/", "_vendor/")) or "xpu" in rel or "mtia" in rel:
            continue
        text = path.read_text(errors="replace")
        if "get_device_properties" not in text:
            continue
        for m in _DIRECT.finditer(text):
            found.setdefault(m.group(1), set()).add(rel)
        for m in _ASSIGN.finditer(text):
            var, window = re.escape(m.group(1)), text[m.end():m.end() + 3000]
            names = re.findall(rf"\b{var}\.(\w+)", window)
            names += re.findall(rf"\b(?:getattr|hasattr)\(\s*{var}\s*,\s*\"(\w+)\"", window)
            for name in names:
                found.setdefault(name, set()).add(rel)
    return found


def _stub_fields() -> set[str]:
    """The fields of ``torch._C._CudaDeviceProperties`` as torch's own type stub declares them."""
    stub = (TORCH_DIR / "_C" / "__init__.pyi").read_text()
    body = stub.split("class _CudaDeviceProperties:", 1)[1].split("\nclass ", 1)[0].split("\n#", 1)[0]
    return set(re.findall(r"^\s+(\w+):", body, re.M))


@pytest.fixture(scope="module")
def cpu_api() -> dict[str, object]:
    return build_cuda_api("cpu", SiteCounter(None, "cpu", None))


def test_properties_carry_every_field_torch_reads(cpu_api):
    props = cpu_api["get_device_properties"]()  # type: ignore[operator]
    reads = _torch_reads()
    # the scan itself still finds what this test exists for (it would pass vacuously otherwise)
    assert {"gcnArchName", "multi_processor_count", "warp_size", "major", "name"} <= set(reads), sorted(reads)
    wanted = (set(reads) - XPU_ONLY) | _stub_fields()
    missing = {name: sorted(reads.get(name, {"torch/_C/__init__.pyi"})) for name in wanted if not hasattr(props, name)}
    assert not missing, f"fields torch reads that the redirect's properties lack: {missing}"
    assert {"total_memory", "uuid", "L2_cache_size", "max_threads_per_multi_processor", "shared_memory_per_block",
            "is_integrated", "regs_per_multiprocessor", "shared_memory_per_block_optin"} <= set(props._fields)


def test_properties_describe_one_consistent_device(cpu_api):
    props = cpu_api["get_device_properties"](0)  # type: ignore[operator]
    assert props.name == cpu_api["get_device_name"]() == "ferry-redirect:cpu"  # type: ignore[operator]
    assert cpu_api["get_device_capability"]() == (props.major, props.minor) == (8, 0)  # type: ignore[operator]
    assert props.gcnArchName == props.name  # what a CUDA (not ROCm) build answers: no "gfx" checks fire
    assert props.total_memory > 0 and props.multi_processor_count >= 1 and props.warp_size == 32
    assert repr(props).startswith("_CudaDeviceProperties(name='ferry-redirect:cpu', major=8, minor=0")
    with pytest.raises(AttributeError):
        props.major = 9  # read-only, as torch's


def test_tpx_target_keeps_its_own_description_and_gains_cudas_fields():
    import backend  # noqa: F401  (registers tpx)

    api = build_cuda_api("tpx", SiteCounter(None, "tpx", None))
    props = api["get_device_properties"]()  # type: ignore[operator]
    own = torch.tpx.get_device_properties()  # type: ignore[attr-defined]
    assert (props.name, props.total_memory, props.major) == (own.name, own.total_memory, own.major)
    assert props.gcnArchName == own.name and props.warp_size == 32
    assert _stub_fields() <= set(props._fields)
