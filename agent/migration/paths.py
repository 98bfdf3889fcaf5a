"""Where Ferry keeps things, and where it may write what the user asked for.

The one place paths are computed: the state directory (``--state-dir``, ``$FERRY_STATE_DIR``, else
``~/.ferry``) holds ``workspaces/<migration id>`` (the private copies) and ``artifacts/<migration
id>/<label>`` (each run's probe, profile and result: ``reference``, ``golden``, ``cpu-check-N-<digest>``...)
and ``artifacts/.run-cache/<key>`` (runs of an unchanged original kept across migrations);
the knowledge base is ``<default state dir>/knowledge`` unless ``$FERRY_KB_PATH`` names it; the
service's data dir holds ``sessions/<session id>`` with the session's ``repo`` and its
``out-<attempt>`` directories. Every id is checked (:func:`agent.ids.inside`) before it is joined.

The output directories the user names (``--out``, ``--state-dir``, ``--artifacts``) are checked
before any work starts: the directory must be one the user could create and write; the
filesystem root, the kernel's pseudo filesystems (``/proc``, ``/sys``, ``/dev``, ``/run``), system
directories and world-writable shared directories themselves (``/tmp``: a fixed file name written
there by root is a classic link attack) are refused with a message that says what to use instead.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

from agent.ids import inside
from agent.settings import settings

DEFAULT_STATE_DIR = Path("~/.ferry")
REFERENCE_LABEL = "reference"


def state_dir(path: str | Path | None) -> Path:
    """The state directory (checkpoints, workspaces, artifacts), created when missing."""
    d = Path(path).expanduser() if path else DEFAULT_STATE_DIR.expanduser()
    d.mkdir(parents=True, exist_ok=True)
    return d


def workspaces_root(state_dir: str | Path, migration_id: str) -> Path:
    """``<state dir>/workspaces/<id>``; InvalidId for an id that is not a plain name or leads out of it."""
    return inside(Path(state_dir).expanduser() / "workspaces", migration_id)


def artifacts_root(state_dir: str | Path, migration_id: str) -> Path:
    """``<state dir>/artifacts/<id>``; InvalidId for an id that is not a plain name or leads out of it."""
    return inside(Path(state_dir).expanduser() / "artifacts", migration_id)


def run_cache_root(state_dir: str | Path) -> Path:
    """``<state dir>/artifacts/.run-cache``: the runs of unchanged originals kept across migrations
    (``agent.migration.run_cache``); a migration id never starts with a dot, so no migration's directory."""
    return Path(state_dir).expanduser() / "artifacts" / ".run-cache"


def run_artifacts(state_dir: str | Path, migration_id: str, label: str) -> Path:
    """``<state dir>/artifacts/<id>/<label>``: one run's artifacts (``reference``, ``tests-2-<digest>``...)."""
    return artifacts_root(state_dir, migration_id) / label


TRAJECTORY_FILE = "trajectory.jsonl"  # agent.llm.trajectory: beside result.json in the ``out`` artifacts


def reference_artifacts(state_dir: str | Path, migration_id: str) -> Path:
    """Where the reference run (the original on CPU) leaves its artifacts."""
    return run_artifacts(state_dir, migration_id, REFERENCE_LABEL)


def knowledge_dir() -> Path:
    """``$FERRY_KB_PATH``, else ``knowledge`` in Ferry's default state dir."""
    given = settings().paths.kb_path
    return Path(given).expanduser() if given else DEFAULT_STATE_DIR.expanduser() / "knowledge"


def sessions_root(data_dir: Path) -> Path:
    """``<data dir>/sessions``: every session's directory."""
    return data_dir / "sessions"


def session_dir(data_dir: Path, sid: str) -> Path:
    """``<data dir>/sessions/<sid>``; InvalidId for an id that is not a plain name or leads out of it."""
    return inside(sessions_root(data_dir), sid, what="session id")


def session_repo(data_dir: Path, sid: str) -> Path:
    """The session's own copy of the repository (the migration reads only this)."""
    return session_dir(data_dir, sid) / "repo"


def session_out(data_dir: Path, sid: str, attempt: int) -> Path:
    """The outputs of the session's ``attempt``-th migration."""
    return session_dir(data_dir, sid) / f"out-{attempt}"

# Trees Ferry never writes into (any depth).
SYSTEM_TREES: tuple[str, ...] = (
    "/proc", "/sys", "/dev", "/run", "/boot", "/etc", "/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64",
    "/libx32", "/var/run", "/var/lock", "/snap",
)
# Directories that are fine as parents but not as the output directory itself.
SHARED_DIRS: tuple[str, ...] = ("/", "/var", "/var/lib", "/var/cache", "/var/log", "/var/spool", "/opt", "/srv",
                                 "/mnt", "/media", "/home")


class OutputPathError(ValueError):
    """The output directory cannot be used; the message says why and what to do."""


def _inside(path: Path, tree: str) -> bool:
    return path == Path(tree) or Path(tree) in path.parents


def _nearest_existing(path: Path) -> Path:
    for candidate in (path, *path.parents):
        if os.path.lexists(candidate):
            return candidate
    return Path("/")


def _writable_dir(path: Path) -> str | None:
    """Why ``path`` (an existing directory) cannot take new files, or None when it can."""
    try:
        st = os.stat(path)
    except OSError as exc:
        return f"cannot be read ({exc.strerror})"
    if not stat.S_ISDIR(st.st_mode):
        return "is not a directory"
    try:
        if os.statvfs(path).f_flag & os.ST_RDONLY:
            return "is on a read-only filesystem"
    except OSError as exc:
        return f"cannot be inspected ({exc.strerror})"
    if not os.access(path, os.W_OK | os.X_OK):
        return "is not writable by you"
    return None


def check_output_dir(value: str | os.PathLike[str], flag: str) -> Path:
    """The absolute directory ``value`` names, after checking Ferry may create and write it.

    Nothing is created here. Raises :class:`OutputPathError` with a message naming ``flag``.
    """
    raw = str(value)
    if not raw.strip():
        raise OutputPathError(f"{flag} is empty; give a directory Ferry can create and write")
    path = Path(raw).expanduser()
    resolved = Path(os.path.realpath(path))  # a link to /etc is /etc
    example = "~/.ferry" if "state" in flag else "./ferry-out"
    hint = f"give {flag} a directory Ferry can create and write, e.g. {flag} {example}"
    for tree in SYSTEM_TREES:
        if _inside(resolved, tree):
            raise OutputPathError(f"{flag} {raw}: {resolved} is inside {tree}, a system or kernel directory Ferry "
                                  f"never writes into; {hint}")
    if str(resolved) in SHARED_DIRS:
        raise OutputPathError(f"{flag} {raw}: {resolved} is a shared system directory, not an output directory; {hint}")
    anchor = _nearest_existing(resolved)
    if anchor == resolved:
        why = _writable_dir(resolved)
        if why is None:
            st = os.stat(resolved)
            if st.st_mode & stat.S_IWOTH and st.st_mode & stat.S_ISVTX:
                raise OutputPathError(f"{flag} {raw}: {resolved} is a world-writable shared directory (like /tmp); "
                                      f"files with fixed names there can be replaced by other users: use a "
                                      f"directory inside it, e.g. {flag} {resolved / 'ferry-out'}")
            return resolved
        raise OutputPathError(f"{flag} {raw}: {resolved} {why}; {hint}")
    why = _writable_dir(anchor)
    if why is not None:
        raise OutputPathError(f"{flag} {raw}: cannot create {resolved}: {anchor} {why}; {hint}")
    return resolved
