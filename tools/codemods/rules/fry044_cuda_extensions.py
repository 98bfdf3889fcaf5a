"""FRY044 (kernels.cuda-extension): CUDAExtension, cpp_extension.load(sources=["*.cu"]) -> unsupported."""

from __future__ import annotations

import libcst as cst

from tools.codemods.generic import NameReportRule
from tools.codemods.nodes import bool_value, code, kwarg
from tools.codemods.tables import CPP_EXTENSION_LOADERS, CPP_EXTENSION_NAMES


class CudaExtensions(NameReportRule):
    ID = "FRY044"
    NAME = "kernels.cuda-extension"
    DESCRIPTION = ("torch.utils.cpp_extension.CUDAExtension and load()/load_inline() of .cu sources, cuda_sources "
                   "or with_cuda=True -> unsupported: use the pure-PyTorch reference implementation.")
    CATEGORY = "unsupported"
    ENTRIES = (44,)
    NAMES = CPP_EXTENSION_NAMES

    def visit_Call(self, node: cst.Call) -> None:
        if self.qname_in(node.func, CPP_EXTENSION_LOADERS) is None:
            return
        sources = kwarg(node, "sources")
        text = code(sources.value) if sources is not None else (code(node.args[1].value) if len(node.args) > 1 else "")
        with_cuda = kwarg(node, "with_cuda")
        if (".cu'" in text or '.cu"' in text or kwarg(node, "cuda_sources") is not None
                or (with_cuda is not None and bool_value(with_cuda.value))):
            self.hit(node, "builds a CUDA kernel extension that cannot run on tpx", category="unsupported",
                     suggestion="call the pure-PyTorch reference implementation of the op instead")


RULE = CudaExtensions
