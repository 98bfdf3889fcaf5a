"""Distributed runs: parity compares rank 0's dump (the run's own probe dir); the other ranks' dumps
(``rank-N/`` beside it, written by the runner's bootstrap) say whether the ranks agree where they must.

A metric every rank prints with the same values in the reference run (an all-reduced loss, a
broadcast accuracy) must agree between the ranks of the target run too; one the ranks print with
different values in the reference (each rank's local loss) is per rank and not checked.
"""

from __future__ import annotations

import logging
import math
import re
from dataclasses import dataclass, field
from pathlib import Path

from tools.probe.dump import DumpError, ProbeDump

logger = logging.getLogger(__name__)

RANK_DIR = re.compile(r"^rank-(?P<rank>[1-9]\d{0,5})$")
AGREE_RTOL = 1e-6
AGREE_ATOL = 1e-9


@dataclass
class RankAgreement:
    ranks: int = 1  # how many ranks' dumps the target run left
    checked: list[str] = field(default_factory=list)  # metrics the ranks must agree on
    disagreeing: dict[str, str] = field(default_factory=dict)  # metric -> what differs

    def notes(self) -> list[str]:
        if self.ranks < 2:
            return []
        out = [f"distributed run: parity compares rank 0 of {self.ranks} ranks"]
        if self.checked:
            out.append(f"ranks agree on {len(self.checked) - len(self.disagreeing)}/{len(self.checked)} metric(s) "
                       f"every rank prints ({', '.join(self.checked[:5])})")
        out += [f"ranks disagree on {name} in the target run: {why}" for name, why in self.disagreeing.items()]
        return out


def rank_dumps(probe_dir: Path | str) -> dict[int, ProbeDump]:
    """Every rank's dump of a run: rank 0 in ``probe_dir``, rank N in ``probe_dir/rank-N`` (plain
    directories only; a dump that does not load is left out)."""
    root = Path(probe_dir)
    dirs: dict[int, Path] = {0: root}
    try:
        entries = list(root.iterdir())
    except OSError:
        entries = []
    for entry in entries:
        m = RANK_DIR.match(entry.name)
        if m is not None and entry.is_dir() and not entry.is_symlink():
            dirs[int(m["rank"])] = entry
    out: dict[int, ProbeDump] = {}
    for rank, path in sorted(dirs.items()):
        try:
            out[rank] = ProbeDump(path)
        except DumpError as exc:
            logger.info("parity: rank %d's dump not read: %s", rank, exc)
    return out


def _close(x: float, y: float) -> bool:
    return math.isclose(x, y, rel_tol=AGREE_RTOL, abs_tol=AGREE_ATOL)


def _same(a: list[float], b: list[float]) -> bool:
    return len(a) == len(b) and all(_close(x, y) for x, y in zip(a, b, strict=True))


def _agreeing(dumps: dict[int, ProbeDump]) -> set[str]:
    """The metrics every rank printed with the same values."""
    if len(dumps) < 2:
        return set()
    first, *rest = dumps.values()
    return {name for name, values in first.scalars.items() if values
            and all(name in d.scalars and _same(values, d.scalars[name]) for d in rest)}


def rank_agreement(ref_dir: Path | str, target_dir: Path | str) -> RankAgreement:
    """Whether the target's ranks agree on the metrics the reference's ranks agree on."""
    ref, tgt = rank_dumps(ref_dir), rank_dumps(target_dir)
    result = RankAgreement(ranks=len(tgt))
    if len(tgt) < 2 or 0 not in tgt:
        return result
    result.checked = sorted(_agreeing(ref) & set(tgt[0].scalars))
    base = tgt[0].scalars
    for name in result.checked:
        for rank, dump in tgt.items():
            values = dump.scalars.get(name)
            if values is None:
                result.disagreeing[name] = f"rank {rank} did not print it"
                break
            if not _same(base[name], values):
                pairs = enumerate(zip(base[name], values, strict=False))
                i = next((k for k, (x, y) in pairs if not _close(x, y)), min(len(values), len(base[name])))
                a = base[name][i] if i < len(base[name]) else None
                b = values[i] if i < len(values) else None
                result.disagreeing[name] = f"value {i}: rank 0 {a}, rank {rank} {b}"
                break
    return result
