"""Make the private workspace hold exactly what the state says (original + edited files).

This is what makes a killed migration resumable without losing edits: the workspace is a pure
function of the original repository and ``state["files"]``. A missing workspace is re-created;
a present one is re-synchronised (files a killed node half-wrote are put back).
"""

from __future__ import annotations

import hashlib
import logging
from pathlib import Path

from agent.migration import adapters
from tools.patch import list_source_files, read_text

logger = logging.getLogger(__name__)


def materialise(source: Path, workspace: Path | None, files: dict[str, str], root: Path) -> Path:
    """Return a workspace directory whose source files equal ``source`` overlaid with ``files``."""
    if workspace is None or not Path(workspace).is_dir():
        if workspace is not None:
            logger.warning("workspace %s is gone; re-creating it from %s and %d edited files", workspace, source,
                           len(files))
        workspace = adapters.create_workspace(source, root)
    workspace = Path(workspace)
    expected: dict[str, str | None] = {rel: read_text(source / rel, source) for rel in list_source_files(source)}
    expected.update(files)
    for rel, want in sorted(expected.items()):
        if want is None:
            continue  # unreadable in the original (binary, not UTF-8): the copy already holds it
        target = workspace / rel
        have = read_text(target, workspace) if target.is_file() else None
        if have != want:
            _unlink_links(workspace, rel)  # never written through: a run may have planted a link on the way
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(want, encoding="utf-8")
            logger.debug("materialise: wrote %s", rel)
    return workspace


def _unlink_links(workspace: Path, rel: str) -> None:
    """Remove any symlink at ``workspace/rel`` or at a directory on the way to it (a run can leave them)."""
    here = workspace
    for part in rel.split("/"):
        here = here / part
        if here.is_symlink():
            logger.warning("materialise: %s in the workspace is a symlink; replaced by the file's own text",
                           here.relative_to(workspace))
            here.unlink()
            return
        if not here.is_dir():
            return


def current_text(source: Path, files: dict[str, str], rel: str) -> str | None:
    """The text a file has in the migration so far (edited text, else the original)."""
    if rel in files:
        return files[rel]
    return read_text(source / rel, source) if (source / rel).is_file() else None


def code_digest(files: dict[str, str]) -> str:
    """A digest of the migration's edited files (path and text of each): two rounds whose digests are equal
    run the same code (the rest is the original, the same for the whole migration)."""
    h = hashlib.sha256()
    for rel, text in sorted(files.items()):
        for part in (rel, text):
            data = part.encode("utf-8", "surrogatepass")
            h.update(len(data).to_bytes(8, "little"))
            h.update(data)
    return h.hexdigest()


def round_label(role: str, iteration: int, files: dict[str, str]) -> str:
    """Names a run of one round's code (``tests-2-<digest>``): the round and the code's digest, so that a run
    started for code the round does not end up with (a prepared run the policy did not follow) is never
    joined as that round's."""
    return f"{role}-{iteration}-{code_digest(files)[:12]}"
