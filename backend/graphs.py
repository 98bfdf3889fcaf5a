"""Graph capture on tpx: ``torch.tpx.graph`` / ``torch.tpx.CUDAGraph`` do what CUDA graphs do, eagerly.

tpx has no graphs of kernels. The stand-in (``cuda_semantics/graphs.py``, shared with the CPU reference
run's redirect) records the ops a capture dispatches and replays them on the same tensors, keeping CUDA
graphs' contract at the level of PyTorch's ops. ``make_graphed_callables`` returns the callables
themselves (they run eagerly: the same results).
"""

from __future__ import annotations

from ._siblings import sibling

_shared = sibling("cuda_semantics.graphs")


class Graph(_shared.EagerGraph):
    """A captured sequence of ops, replayed eagerly on the tensors it captured (``torch.cuda.CUDAGraph``'s
    methods)."""

    owner = "tpx"

    def __init__(self, keep_graph: bool = False) -> None:
        super().__init__()


graph = _shared.GraphContext
make_graphed_callables = _shared.make_graphed_callables
graph_pool_handle = _shared.graph_pool_handle
is_current_stream_capturing = _shared.is_current_stream_capturing
