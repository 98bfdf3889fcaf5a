"""FRY021 (streams.cuda-graphs): calls of torch.cuda.CUDAGraph, torch.cuda.graph, make_graphed_callables,
graph_pool_handle, is_current_stream_capturing -> the device module's (torch.get_device_module(device).*).

On CUDA the device module is ``torch.cuda``: the same calls. tpx has no graphs of kernels; its device
module replays a capture eagerly with the same contract (``backend/graphs.py``): a capture computes
nothing the program can see, and ``replay()`` runs the captured ops again on the tensors the capture used,
so it reads the static inputs as they are now and writes the static outputs the code kept (the program
does on tpx what it does on CUDA, warm-up and all; a switch to the program's own eager path would not,
where the two paths differ). Other references to the graph API (``isinstance(g, torch.cuda.CUDAGraph)``)
stay unsupported.
"""

from __future__ import annotations

import libcst as cst

from tools.codemods.generic import CallMapRule, NameReportRule
from tools.codemods.tables import GRAPH_CALLS, GRAPH_NAMES


class CudaGraphs(CallMapRule, NameReportRule):
    ID = "FRY021"
    NAME = "streams.cuda-graphs"
    DESCRIPTION = ("torch.cuda.CUDAGraph(), torch.cuda.graph(g), make_graphed_callables(...), graph_pool_handle(), "
                   "is_current_stream_capturing() -> torch.get_device_module(device).* (torch.cuda on CUDA; tpx "
                   "replays a capture eagerly on the captured tensors); other references to the graph API -> "
                   "unsupported.")
    CATEGORY = "auto"
    ENTRIES = (21,)
    CALLS = GRAPH_CALLS
    NAMES = GRAPH_NAMES

    def _check(self, node: cst.CSTNode) -> None:
        parent = self.parent(node)
        if isinstance(parent, cst.Call) and parent.func is node and self.qname_in(node, GRAPH_CALLS) is not None:
            return  # the call is rewritten (visit_Call)
        super()._check(node)


RULE = CudaGraphs
