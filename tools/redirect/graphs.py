"""``torch.cuda.CUDAGraph`` / ``torch.cuda.graph`` on a device without CUDA graphs.

The stand-in (``cuda_semantics/graphs.py``, shared with tpx's device module) records the ops a capture
dispatches and replays them eagerly on the same tensors: tensors the code kept from the capture (a
static loss, the gradients) hold the replay's values and in-place updates (an optimizer step) apply
again; capturing executes nothing on CUDA, so what existed before it keeps its contents. Here each
use is also recorded as a redirected site.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..guest import sibling
from .sites import SiteCounter

if TYPE_CHECKING:
    from cuda_semantics import graphs as _shared
else:  # under the root this code runs under (a user's process: Ferry's private one)
    _shared = sibling("cuda_semantics.graphs")


class _Graph(_shared.EagerGraph):
    """``torch.cuda.CUDAGraph`` stand-in, recording its uses."""

    owner = "ferry redirect"
    recorder: SiteCounter  # set on the class built for the redirect (graph_api)

    def __init__(self, *args: object, **kwargs: object) -> None:
        self.recorder.record("torch.cuda.CUDAGraph", skip=3)
        super().__init__()

    def replay(self) -> None:
        self.recorder.record("CUDAGraph.replay", skip=3)
        super().replay()


class _GraphContext(_shared.GraphContext):
    """``torch.cuda.graph(g, pool=None, stream=None, capture_error_mode="global")``, recording its use."""

    def __init__(self, cuda_graph: _Graph, pool: object = None, stream: object = None,
                 capture_error_mode: str = "global") -> None:
        cuda_graph.recorder.record("torch.cuda.graph", skip=3)
        super().__init__(cuda_graph)


def graph_api(rec: SiteCounter) -> dict[str, object]:
    """name -> replacement for ``torch.cuda.<name>`` (CUDA graphs)."""
    graph_cls = type("CUDAGraph", (_Graph,), {"recorder": rec, "__module__": "torch.cuda"})
    return {
        "CUDAGraph": graph_cls,
        "graph": _GraphContext,
        "graph_pool_handle": _shared.graph_pool_handle,
        "is_current_stream_capturing": _shared.is_current_stream_capturing,
    }
