"""One migration's latest checkpoint carried from one checkpoint store to another, as plain JSON.

A migration the service hands to a Ray worker runs there over the worker's own store; what it saved
comes back here (and what the service holds goes there for a resume) as one text: the latest
checkpoint, its metadata and its pending writes (the question an interrupted node asks). The state is
plain JSON (:mod:`agent.migration.state`), so is the text; the one other value a checkpoint holds, a
LangGraph ``Interrupt``, travels as a tagged object. Nothing else is accepted either way: decoding is
``json.loads`` (no class named by the text is ever built), and a text that is not one checkpoint is
:class:`HandoverRefused`.

``rewrite`` is applied to every string of the state and of the writes on the way (the paths of one
machine's directories become the other's).
"""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Callable
from typing import Any

FORMAT = 1
MAX_CHARS = 64 * 1024 * 1024
_INTERRUPT = "__ferry_interrupt__"
_KEYS = ("v", "id", "ts", "channel_values", "channel_versions", "versions_seen")

Rewrite = Callable[[str], str]


class HandoverRefused(ValueError):
    """The text is not one migration's checkpoint in this format."""


def _config(migration_id: str) -> dict[str, Any]:
    return {"configurable": {"thread_id": migration_id, "checkpoint_ns": ""}}


def _rewritten(value: Any, rewrite: Rewrite) -> Any:
    from langgraph.types import Interrupt

    if isinstance(value, str):
        return rewrite(value)
    if isinstance(value, dict):
        return {k: _rewritten(v, rewrite) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_rewritten(v, rewrite) for v in value]
    if isinstance(value, Interrupt):
        return Interrupt(value=_rewritten(value.value, rewrite), id=value.id)
    return value


def _encode(value: Any) -> Any:
    from langgraph.types import Interrupt

    if isinstance(value, Interrupt):
        return {_INTERRUPT: {"value": value.value, "id": value.id}}
    raise TypeError(f"a checkpoint value of type {type(value).__name__} cannot be carried")


def _decode(obj: dict[str, Any]) -> Any:
    if _INTERRUPT in obj:
        from langgraph.types import Interrupt

        inner = obj[_INTERRUPT]
        if len(obj) != 1 or not isinstance(inner, dict) or not isinstance(inner.get("id"), str):
            raise HandoverRefused("a malformed interrupt")
        return Interrupt(value=inner.get("value"), id=inner["id"])
    return obj


def export_latest(saver: Any, migration_id: str, rewrite: Rewrite = str) -> str | None:
    """The migration's latest checkpoint in ``saver`` as text (None when it has none)."""
    saved = saver.get_tuple(_config(migration_id))
    if saved is None:
        return None
    checkpoint = dict(saved.checkpoint)
    checkpoint["channel_values"] = _rewritten(checkpoint.get("channel_values") or {}, rewrite)
    writes = [[task, channel, _rewritten(value, rewrite)] for task, channel, value in (saved.pending_writes or [])]
    return json.dumps({"format": FORMAT, "migration_id": migration_id, "checkpoint": checkpoint,
                       "metadata": dict(saved.metadata or {}), "writes": writes}, default=_encode)


def parse(text: str, migration_id: str, rewrite: Rewrite = str) -> tuple[dict[str, Any], dict[str, Any],
                                                                       list[tuple[str, str, Any]]]:
    """The checkpoint, metadata and writes of ``text``, checked; HandoverRefused when it is not one
    checkpoint of ``migration_id``."""
    if len(text) > MAX_CHARS:
        raise HandoverRefused(f"the checkpoint is {len(text)} characters, over {MAX_CHARS}")
    try:
        doc = json.loads(text, object_hook=_decode)
    except (ValueError, RecursionError) as exc:
        raise HandoverRefused(f"the checkpoint is not JSON: {exc}") from None
    if not isinstance(doc, dict) or doc.get("format") != FORMAT or doc.get("migration_id") != migration_id:
        raise HandoverRefused(f"not a checkpoint of migration {migration_id} in format {FORMAT}")
    checkpoint, metadata, writes = doc.get("checkpoint"), doc.get("metadata"), doc.get("writes")
    if not isinstance(checkpoint, dict) or any(k not in checkpoint for k in _KEYS) \
            or not isinstance(checkpoint["channel_values"], dict) or not isinstance(checkpoint["id"], str) \
            or not isinstance(checkpoint["channel_versions"], dict) or not isinstance(metadata, dict) \
            or not isinstance(writes, list):
        raise HandoverRefused("the checkpoint lacks its parts (values, versions, metadata, writes)")
    values = checkpoint["channel_values"]
    if values.get("migration_id", migration_id) != migration_id:
        raise HandoverRefused(f"the checkpoint's state is another migration's ({values.get('migration_id')!r})")
    checkpoint["channel_values"] = _rewritten(values, rewrite)
    out: list[tuple[str, str, Any]] = []
    for w in writes:
        if not (isinstance(w, list) and len(w) == 3 and isinstance(w[0], str) and isinstance(w[1], str)):
            raise HandoverRefused("a pending write is not [task, channel, value]")
        out.append((w[0], w[1], _rewritten(w[2], rewrite)))
    return checkpoint, metadata, out


def import_latest(saver: Any, migration_id: str, parsed: tuple[dict[str, Any], dict[str, Any],
                                                                list[tuple[str, str, Any]]]) -> None:
    """Save a parsed checkpoint (:func:`parse`) as the migration's latest in ``saver``, with its writes."""
    checkpoint, metadata, writes = parsed
    saved = saver.put(_config(migration_id), checkpoint, metadata, dict(checkpoint["channel_versions"]))
    by_task: dict[str, list[tuple[str, Any]]] = defaultdict(list)
    for task, channel, value in writes:
        by_task[task].append((channel, value))
    for task, items in by_task.items():
        saver.put_writes(saved, items, task)
