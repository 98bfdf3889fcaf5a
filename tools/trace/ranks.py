"""Distributed runs: every rank's output, the first failing rank, and the worker's own traceback.

``torchrun`` (``torch.distributed.run``) prefixes each line a worker writes with ``[rankN]:`` and
ends a failed job with ``ChildFailedError``, whose "Root Cause (first observed failure)" block names
the rank that failed first (its error file's traceback too, when the worker recorded one:
``TORCHELASTIC_ERROR_FILE``, which Ferry's bootstrap fills for every torchrun worker).
``torch.multiprocessing.spawn`` raises ``ProcessRaisedException`` in the parent with the failing
process's traceback inside its message ("-- Process N terminated with the following error:").
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from tools.trace.models import ExceptionInfo

RANK_LINE = re.compile(r"^\[(?:rank|default)(?P<rank>\d+)\]:\s?(?P<text>.*)$")
_ROOT_CAUSE = re.compile(r"Root Cause \(first observed failure\):\s*\n(?P<body>.*?)(?:\n=+|\Z)", re.S)
_FAILURE_RANK = re.compile(r"^\s*rank\s*:\s*(?P<rank>\d+)(?:\s*\(local_rank:\s*(?P<local>\d+)\))?", re.M)
_EXITCODE = re.compile(r"^\s*exitcode\s*:\s*(?P<code>-?\d+)", re.M)
_SPAWN_PROCESS = re.compile(r"^-- Process (?P<rank>\d+) terminated with the following error:\s*$", re.M)
MAX_RANK = 1 << 20  # a rank number past this is not one (validate what the run printed)


@dataclass(frozen=True)
class RootCause:
    """What torchrun's ChildFailedError says about the first failure."""

    rank: int
    local_rank: int | None
    exitcode: int | None


def split_ranks(text: str) -> tuple[dict[int, str], str]:
    """Each rank's lines (``[rankN]:`` prefix removed), and the lines with no rank prefix (the
    launcher's own, or a program's that prints without torchrun)."""
    ranks: dict[int, list[str]] = {}
    other: list[str] = []
    for line in text.splitlines():
        m = RANK_LINE.match(line)
        if m is not None and int(m["rank"]) <= MAX_RANK:
            ranks.setdefault(int(m["rank"]), []).append(m["text"])
        else:
            other.append(line)
    return {r: "\n".join(lines) for r, lines in sorted(ranks.items())}, "\n".join(other)


def root_cause(message: str) -> RootCause | None:
    """The first observed failure named by a ChildFailedError message, or None."""
    m = _ROOT_CAUSE.search(message)
    if m is None:
        return None
    body = m["body"]
    rank = _FAILURE_RANK.search(body)
    if rank is None or int(rank["rank"]) > MAX_RANK:
        return None
    code = _EXITCODE.search(body)
    return RootCause(rank=int(rank["rank"]), local_rank=int(rank["local"]) if rank["local"] else None,
                     exitcode=int(code["code"]) if code else None)


def spawn_failure(info: ExceptionInfo) -> tuple[int, str] | None:
    """The failing process's index and its traceback text inside a ``ProcessRaisedException``
    (torch.multiprocessing.spawn), or None."""
    if info.exc_type.rsplit(".", 1)[-1] != "ProcessRaisedException":
        return None
    m = _SPAWN_PROCESS.search(info.message)
    if m is None or int(m["rank"]) > MAX_RANK:
        return None
    return int(m["rank"]), info.message[m.end():].lstrip("\n")
