"""Reading the redirect's call-site log (for ``ferry scan`` and reports)."""

from __future__ import annotations

import json
import logging
from pathlib import Path

from pydantic import BaseModel

logger = logging.getLogger(__name__)


class RedirectRecord(BaseModel):
    """One call site the CUDA redirect rewrote at runtime (counts summed over processes)."""

    file: str  # relative to the repository when the call was inside it
    line: int
    function: str | None = None
    api: str  # e.g. "torch.zeros(device=)", "Tensor.cuda", "torch.cuda.is_available"
    mapped_to: str  # the device it was mapped to, or "unsupported"
    count: int
    processes: int = 1


def load_redirect_log(path: Path | str) -> list[RedirectRecord]:
    """Merge a JSON-lines redirect log into one record per (file, line, api, mapped_to).

    Each process writes a ``site`` line when it first meets a site and ``final`` lines with its
    counts at exit; per process the largest count wins, then processes are summed. Malformed
    lines are skipped with a warning (a killed child can leave a torn last line).
    """
    path = Path(path)
    if not path.exists():
        return []
    per_proc: dict[tuple, dict] = {}
    for n, line in enumerate(path.read_text(errors="replace").splitlines(), 1):
        if not line.strip():
            continue
        try:
            e = json.loads(line)
            key = (e["file"], int(e["line"]), e["api"], e["mapped_to"])
            pid = int(e.get("pid", 0))
            count = int(e.get("count", 1))
        except (ValueError, KeyError, TypeError) as exc:
            logger.warning("%s:%d: skipping malformed redirect log line (%s)", path, n, exc)
            continue
        slot = per_proc.setdefault((key, pid), {"count": 0, "function": e.get("function")})
        slot["count"] = max(slot["count"], count)
    merged: dict[tuple, RedirectRecord] = {}
    for (key, _pid), slot in per_proc.items():
        rec = merged.get(key)
        if rec is None:
            merged[key] = RedirectRecord(file=key[0], line=key[1], function=slot["function"], api=key[2],
                                         mapped_to=key[3], count=slot["count"])
        else:
            rec.count += slot["count"]
            rec.processes += 1
    return sorted(merged.values(), key=lambda r: (r.file, r.line, r.api))
