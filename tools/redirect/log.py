"""Reading the redirect's call-site log (for ``ferry scan`` and reports).

The log is written by the sandboxed run: it is read through sandbox.artifacts (no links, a regular
file, at most ``LOG_MAX_BYTES``) and every line is validated (``_LogLine``) before it counts.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Annotated, TypedDict

from pydantic import BaseModel, Field, StrictInt, StrictStr, ValidationError

from sandbox.artifacts import ArtifactMissing, ArtifactRefused, read_text

logger = logging.getLogger(__name__)

LOG_MAX_BYTES = 64 * 1024**2
MAX_WARNED_LINES = 20  # malformed lines warned about one by one; the rest are counted
Count = Annotated[StrictInt, Field(ge=0, le=2**53)]
SiteKey = tuple[str, int, str, str]  # file, line, api, mapped_to


class RedirectLogError(ValueError):
    """The redirect log exists but was not read (a link, not a regular file, too large)."""


class RedirectRecord(BaseModel):
    """One call site the CUDA redirect rewrote at runtime (counts summed over processes)."""

    file: str  # relative to the repository when the call was inside it
    line: int
    function: str | None = None
    api: str  # e.g. "torch.zeros(device=)", "Tensor.cuda", "torch.cuda.is_available"
    mapped_to: str  # the device it was mapped to, or "unsupported"
    count: int
    processes: int = 1


class _LogLine(BaseModel):
    """One line as tools/redirect/sites.py writes it (``site`` or ``final``)."""

    file: StrictStr
    line: Count
    api: StrictStr
    mapped_to: StrictStr
    function: StrictStr | None = None
    pid: Count = 0
    count: Count = 1


class _ProcessCount(TypedDict):
    """What one process logged for one site: its largest count, and the function it was in."""

    count: int
    function: str | None


def load_redirect_log(path: Path | str) -> list[RedirectRecord]:
    """Merge a JSON-lines redirect log into one record per (file, line, api, mapped_to).

    Each process writes a ``site`` line when it first meets a site and ``final`` lines with its
    counts at exit; per process the largest count wins, then processes are summed. Malformed
    lines are skipped with a warning (a killed child can leave a torn last line). No file: no
    records; a file that cannot be read safely: ``RedirectLogError``.
    """
    path = Path(path)
    try:
        text = read_text(path.parent, path.name, max_bytes=LOG_MAX_BYTES)
    except ArtifactMissing:
        return []
    except ArtifactRefused as exc:
        raise RedirectLogError(f"redirect log {path} was not read: {exc.reason}") from None
    per_proc: dict[tuple[SiteKey, int], _ProcessCount] = {}
    malformed = 0
    for n, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            e = _LogLine.model_validate(json.loads(line))
        except (ValueError, RecursionError, ValidationError) as exc:
            malformed += 1
            if malformed <= MAX_WARNED_LINES:  # the run chooses how many: millions fit in the cap
                logger.warning("%s:%d: skipping malformed redirect log line (%s)", path, n,
                               str(exc).splitlines()[0][:200])
            continue
        key: SiteKey = (e.file, e.line, e.api, e.mapped_to)
        slot = per_proc.setdefault((key, e.pid), {"count": 0, "function": e.function})
        slot["count"] = max(slot["count"], e.count)
    if malformed > MAX_WARNED_LINES:
        logger.warning("%s: %d malformed redirect log lines skipped in all", path, malformed)
    merged: dict[SiteKey, RedirectRecord] = {}
    for (key, _pid), slot in per_proc.items():
        rec = merged.get(key)
        if rec is None:
            merged[key] = RedirectRecord(file=key[0], line=key[1], function=slot["function"], api=key[2],
                                         mapped_to=key[3], count=slot["count"])
        else:
            rec.count += slot["count"]
            rec.processes += 1
    return sorted(merged.values(), key=lambda r: (r.file, r.line, r.api))
