"""FRY048 (kernels.cuda-libraries): bitsandbytes, xformers, cupy, pycuda, numba.cuda imports -> unsupported."""

from __future__ import annotations

from tools.codemods.generic import NameReportRule
from tools.codemods.tables import CUDA_LIBRARY_MODULES


class CudaLibraries(NameReportRule):
    ID = "FRY048"
    NAME = "kernels.cuda-libraries"
    DESCRIPTION = "bitsandbytes, xformers, cupy, pycuda, numba.cuda imports -> unsupported."
    CATEGORY = "unsupported"
    ENTRIES = (48,)
    MODULES = CUDA_LIBRARY_MODULES


RULE = CudaLibraries
