"""Replaying a trajectory: its replies served in order by the scripted server on loopback, each request
checked against the recorded one.

``ferry replay`` (agent/cli/replay_cmd.py) runs the migration again with the model server pointed at a
:class:`agent.llm.scripted.ScriptedLLM` that serves the recorded replies (and failures) in order, over real
HTTP with the real ``openai`` client: no network, no model, the same edits. Each request must be the one
recorded, up to what may change between two runs of the same migration (:func:`normalized`: absolute
paths, numbers with a decimal point such as timings, the migration id, secrets and the home directory as
the recording scrubbed them); the first that differs is refused (HTTP 400, the migration ends
``failed_llm``) and :func:`divergence` says where.
"""

from __future__ import annotations

import json
import re
from typing import Any

from agent.llm import scripted
from agent.llm.trajectory import FailureEvent, ReplyEvent, Scrubber, Trajectory

_PATH = re.compile(r"(?<![\w.])(?:~|/)(?:[\w.+@-]+/)+[\w.+@-]*")
_DECIMAL = re.compile(r"\d+\.\d+")
_SNIPPET = 160


def script_of(traj: Trajectory) -> list[dict[str, Any]]:
    """The scripted server's steps: each recorded reply, and each recorded failure as an HTTP error (its
    status, else 503: retried as the recorded one was), in the order they were received."""
    steps: list[dict[str, Any]] = []
    for event in traj.replies():
        if isinstance(event, ReplyEvent):
            calls = [scripted.tool_call(c.name, c.arguments, c.id) for c in event.tool_calls]
            steps.append(scripted.reply(*calls, content=event.content, prompt_tokens=event.prompt_tokens,
                                        completion_tokens=event.completion_tokens))
        elif isinstance(event, FailureEvent):
            if event.failure == "no_choices":
                steps.append(scripted.no_choices())
            else:
                steps.append(scripted.error(event.status or 503, f"replayed {event.failure}: {event.message[:200]}"))
    return steps


def normalized(value: Any, ids: tuple[str, ...] = ()) -> Any:
    """``value`` with what legitimately changes between two runs replaced by placeholders."""
    if isinstance(value, str):
        for mid in ids:
            if mid:
                value = value.replace(mid, "<id>")
        value = _PATH.sub("<path>", value)
        return _DECIMAL.sub("<n>", value)
    if isinstance(value, dict):
        return {k: normalized(v, ids) for k, v in value.items()}
    if isinstance(value, list):
        return [normalized(v, ids) for v in value]
    return value


def _show(value: Any) -> str:
    text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)
    return repr(text[:_SNIPPET]) + ("..." if len(text) > _SNIPPET else "")


def _first_difference(recorded: Any, live: Any, where: str) -> str | None:
    if isinstance(recorded, dict) and isinstance(live, dict):
        for key in list(recorded) + [k for k in live if k not in recorded]:
            if key not in live:
                return f"{where}.{key}: recorded {_show(recorded[key])}, missing now"
            if key not in recorded:
                return f"{where}.{key}: not recorded, now {_show(live[key])}"
            found = _first_difference(recorded[key], live[key], f"{where}.{key}")
            if found:
                return found
        return None
    if isinstance(recorded, list) and isinstance(live, list):
        for i, (a, b) in enumerate(zip(recorded, live, strict=False)):
            found = _first_difference(a, b, f"{where}[{i}]")
            if found:
                return found
        if len(recorded) != len(live):
            return f"{where}: {len(recorded)} recorded, {len(live)} now"
        return None
    if recorded != live:
        if isinstance(recorded, str) and isinstance(live, str):
            at = next((i for i, (a, b) in enumerate(zip(recorded, live, strict=False)) if a != b),
                      min(len(recorded), len(live)))
            lo = max(0, at - 40)
            return f"{where}, at character {at}: recorded {_show(recorded[lo:])}, now {_show(live[lo:])}"
        return f"{where}: recorded {_show(recorded)}, now {_show(live)}"
    return None


class RequestMatcher:
    """The scripted server's ``check``: request ``index`` must be the recorded one (normalized)."""

    def __init__(self, traj: Trajectory, scrubber: Scrubber, ids: tuple[str, ...]) -> None:
        self.requests = traj.requests()
        self.scrubber = scrubber
        self.ids = ids

    def __call__(self, index: int, body: dict[str, Any]) -> str | None:
        if index >= len(self.requests):
            return (f"the replay diverged: it sent request {index + 1}, the trajectory recorded "
                    f"{len(self.requests)} requests")
        recorded = self.requests[index]
        live = normalized(self.scrubber.value(body.get("messages") or []), self.ids)
        found = _first_difference(normalized(recorded.messages, self.ids), live, "messages")
        offered = [str((t.get("function") or {}).get("name", "")) for t in body.get("tools") or []]
        if found is None and offered != recorded.tools:
            found = f"tools offered: recorded {recorded.tools}, now {offered}"
        if found is None:
            return None
        return (f"the replay diverged at request {index + 1} (line of the trajectory: the request with n="
                f"{recorded.n}, node {recorded.node or '?'}): {found}")
