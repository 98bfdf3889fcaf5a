"""FRY021 (streams.cuda-graphs): torch.cuda.CUDAGraph, torch.cuda.graph, make_graphed_callables ->
unsupported on tpx (run eagerly behind a flag)."""

from __future__ import annotations

from tools.codemods.generic import NameReportRule
from tools.codemods.tables import GRAPH_NAMES


class CudaGraphs(NameReportRule):
    ID = "FRY021"
    NAME = "streams.cuda-graphs"
    DESCRIPTION = ("torch.cuda.CUDAGraph, torch.cuda.graph, make_graphed_callables -> unsupported on tpx (run eagerly "
                   "behind a flag).")
    CATEGORY = "unsupported"
    ENTRIES = (21,)
    NAMES = GRAPH_NAMES


RULE = CudaGraphs
