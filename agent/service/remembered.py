"""Answers a session remembers: an approval answered once (approve, reject or edit) is not asked again in the
session's later attempts when the same question comes at the same site (the same rule, site and diff).

Which answer was given is read from the session's own events (each ``approval_answer`` answers the
``approval_request`` before it), so that memory is as durable as the events. An ``edit`` answer carries the
reviewer's own files, which the events do not hold (they name the files only): those are kept beside the
session (``<session>/answers/<question key>.json``) with their digest, and read back only when they still
validate (repository-relative paths, the digest of the very files); otherwise the question is asked again.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import uuid
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, ValidationError, model_validator

from agent.service.schemas import Approval
from agent.service.store import SessionStore

logger = logging.getLogger(__name__)

REMEMBERED = ("approve", "reject", "edit")
ANSWERS_DIR = "answers"


def question_key(question: dict[str, Any]) -> str:
    """What makes two approval questions the same: the rule, the site and the proposed diff."""
    same = {k: question.get(k) for k in ("rule", "site", "diff")}
    return hashlib.sha256(json.dumps(same, sort_keys=True, default=str).encode()).hexdigest()


def answers(store: SessionStore, sid: str) -> dict[str, str]:
    """question key -> the answer (approve/reject/edit) given to it last in this session."""
    out: dict[str, str] = {}
    asked: dict[str, Any] | None = None
    after = 0
    while batch := store.events_after(sid, after):
        for event in batch:
            if event.kind == "approval_request":
                asked = event.data
            elif event.kind == "approval_answer" and asked is not None:
                action = event.data.get("action")
                if action in REMEMBERED:
                    out[question_key(asked)] = str(action)
                asked = None
        after = batch[-1].id
    return out


def files_digest(files: dict[str, str]) -> str:
    return hashlib.sha256(json.dumps(files, sort_keys=True, ensure_ascii=False).encode()).hexdigest()


class KeptEdit(BaseModel):
    """An ``edit`` answer's files as kept for later attempts: the question they answered, the files (repository
    path -> text) and their digest."""

    model_config = ConfigDict(extra="forbid")

    question: str
    files: dict[str, str]
    sha256: str

    @model_validator(mode="after")
    def _whole(self) -> KeptEdit:
        if not self.files:
            raise ValueError("no files")
        Approval(action="edit", files=self.files)  # the same paths an answer may name: relative, inside the repo
        if files_digest(self.files) != self.sha256:
            raise ValueError("the files do not match their digest")
        return self


def _kept_path(session: Path, key: str) -> Path:
    if len(key) != 64 or any(c not in "0123456789abcdef" for c in key):
        raise ValueError(f"not a question key: {key!r}")
    return session / ANSWERS_DIR / f"{key}.json"


def keep_edit(session: Path, key: str, files: dict[str, str]) -> None:
    """Keep an ``edit`` answer's files for question ``key`` (written whole or not at all)."""
    kept = KeptEdit(question=key, files=files, sha256=files_digest(files))
    path = _kept_path(session, key)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{uuid.uuid4().hex}.tmp")
    tmp.write_text(kept.model_dump_json(), encoding="utf-8")
    os.replace(tmp, path)


def edited_files(session: Path, key: str) -> dict[str, str] | None:
    """The files of the ``edit`` answer kept for question ``key``; None (ask again) when none is kept or what
    is kept does not validate."""
    try:
        path = _kept_path(session, key)
        if path.is_symlink() or not path.is_file():
            return None
        kept = KeptEdit.model_validate_json(path.read_text(encoding="utf-8"))
    except (OSError, ValueError, ValidationError) as exc:  # ValidationError: a ValueError, named for the reader
        logger.warning("the edit answer kept for question %s is not used: %s", key[:12], exc)
        return None
    if kept.question != key:
        logger.warning("the edit answer kept for question %s answers another question", key[:12])
        return None
    return kept.files
