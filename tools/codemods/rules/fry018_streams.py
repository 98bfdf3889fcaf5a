"""FRY018 (streams.stream): torch.cuda.Stream/current_stream/stream(...) -> torch.Stream(device=device)
/ the device module's stream APIs."""

from __future__ import annotations

from tools.codemods.generic import CallMapRule
from tools.codemods.tables import STREAM_CALLS


class Streams(CallMapRule):
    ID = "FRY018"
    NAME = "streams.stream"
    DESCRIPTION = ("torch.cuda.Stream/current_stream/stream(...) -> torch.Stream(device=device) / the device module's "
                   "stream APIs.")
    CATEGORY = "auto"
    ENTRIES = (18,)
    CALLS = STREAM_CALLS


RULE = Streams
