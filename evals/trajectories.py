"""Where two eval runs' models acted differently: per case, the first tool call that differs between the
trajectories each case's migration recorded (``<case out dir>/trajectory.jsonl``), for ``ferry eval --compare``."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from agent.llm.trajectory import FILE_NAME, TrajectoryError, read_trajectory

_CUT = 160


@dataclass(frozen=True)
class ToolCallDiff:
    name: str  # the case
    index: int | None  # the first differing call (0-based); None: a trajectory could not be read or is missing
    before: str | None  # that call in A (None: A made fewer calls)
    after: str | None
    calls_before: int
    calls_after: int
    note: str = ""

    def render(self) -> str:
        def cut(text: str | None) -> str:
            if text is None:
                return "(no call)"
            return text if len(text) <= _CUT else text[:_CUT] + "..."

        if self.index is None:
            return f"{self.name}: {self.note}"
        return (f"{self.name}: tool calls differ from call {self.index + 1} ({self.calls_before} -> "
                f"{self.calls_after} calls): {cut(self.before)} -> {cut(self.after)}")


def _sequence(out_dir: str) -> tuple[list[str] | None, str]:
    path = Path(out_dir) / FILE_NAME
    if not path.is_file():
        return None, "no trajectory"
    try:
        return read_trajectory(path).tool_sequence(), ""
    except TrajectoryError as exc:
        return None, str(exc)


def tool_call_diff(name: str, out_a: str, out_b: str) -> ToolCallDiff | None:
    """How the case's tool-call sequences differ between the runs (None: the same, or neither recorded one)."""
    a, why_a = _sequence(out_a)
    b, why_b = _sequence(out_b)
    if a is None and b is None:
        return None
    if a is None or b is None:
        note = f"a trajectory in one run only (A: {why_a or 'recorded'}; B: {why_b or 'recorded'})"
        return ToolCallDiff(name, None, None, None, len(a or []), len(b or []), note)
    if a == b:
        return None
    index = next((i for i, (x, y) in enumerate(zip(a, b, strict=False)) if x != y), min(len(a), len(b)))
    return ToolCallDiff(name, index, a[index] if index < len(a) else None, b[index] if index < len(b) else None,
                        len(a), len(b))
