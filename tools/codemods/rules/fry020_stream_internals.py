"""FRY020 (streams.stream-internals): t.record_stream(s), ExternalStream, default_stream -> review."""

from __future__ import annotations

import libcst as cst

from tools.codemods.generic import NameReportRule
from tools.codemods.tables import STREAM_REVIEW_NAMES


class StreamInternals(NameReportRule):
    ID = "FRY020"
    NAME = "streams.stream-internals"
    DESCRIPTION = "t.record_stream(s), torch.cuda.ExternalStream, torch.cuda.default_stream -> review."
    CATEGORY = "review"
    ENTRIES = (20,)
    NAMES = STREAM_REVIEW_NAMES

    def visit_Call(self, node: cst.Call) -> None:
        if isinstance(node.func, cst.Attribute) and node.func.attr.value == "record_stream":
            self.hit(node, "record_stream ties a tensor's memory to a CUDA stream",
                     suggestion="drop it on single-stream devices (tpx, CPU); synchronize instead")


RULE = StreamInternals
