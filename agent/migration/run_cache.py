"""Runs of the ORIGINAL code kept across migrations: one reference run serves every migration of it.

The reference run (the original code on CPU, CUDA redirected to CPU, probe on) depends only on the
original tree, the run command and the user's environment for it (``--python``, ``--env``, ``--cwd``),
the seed, the disk cap, the interpreter and torch it ran on and Ferry's own code that runs inside the
program (the probe, the redirect, the bootstrap). :func:`cache_key` hashes all of them; a passing
reference run is kept under ``<state dir>/artifacts/.run-cache/<key>`` (:func:`store`), and the next
migration of the same code with the same settings, a second ``ferry migrate`` of an unchanged repository
or a resume whose own reference did not finish, takes it from there (:func:`restore`) instead of running
the program again. A changed file, command or setting is a different key: the run is made again.

What is kept is the output of a sandboxed run, so it is read back as untrusted input: the entry must be
a directory of ours with no link, device or FIFO anywhere in it (``os.scandir`` without following links;
any other entry is dropped and the run made again), its ``entry.json`` must parse as :class:`CacheEntry`
and name the very key asked for, and every path of the kept result is rebased by us onto the copy in the
migration's own artifacts directory (paths inside the entry, never ``..``, never absolute). Files are
copied both ways, never hard-linked (the probe's readers refuse a file with a second link).

The same holds for the other runs of the unchanged original: the original's own run on CPU that decides
a failed CPU check (``cpu_original``) and the fp32 golden run (``golden``, its autocast-off variables in
the key); :func:`kept` and :func:`keep` are what the nodes call.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import secrets
import shutil
import stat
import sys
from functools import lru_cache
from importlib import metadata
from pathlib import Path, PurePosixPath

from pydantic import BaseModel, ValidationError

from agent.migration.paths import run_cache_root
from agent.migration.state import MigrationOptions
from sandbox import hostmem
from tools.runner.models import RunResult

logger = logging.getLogger(__name__)

ENTRY_FILE = "entry.json"
REUSED_FILE = "reused.json"  # written into a migration's artifacts dir that holds a kept run
FORMAT = 1
HASHED_FILE_BYTES = 1 << 20  # bigger files are keyed by size and mtime, not read
HASHED_TREE_BYTES = 256 << 20  # past this many bytes read, the rest of the tree is keyed by size and mtime
MAX_TREE_FILES = 20_000  # a bigger source tree is not keyed (its run is made each time)
MAX_ENTRY_FILES = 50_000
MAX_ENTRY_JSON = 4 << 20
KEPT = 8  # entries kept in all; the least recently used go first
PATH_FIELDS = ("probe_dir", "profile_dir", "redirect_log_path", "junit_xml")
# Ferry's code that runs inside the user's program: a change to it may change what a run records
_GUEST_TREES = ("tools/probe", "tools/redirect", "tools/runner/child", "tools/guest.py", "backend")


class CacheEntry(BaseModel):
    """``entry.json``: the key it was stored under, the role, and the run with its paths relative to the entry."""

    format: int
    key: str
    role: str
    result: RunResult
    paths: dict[str, str | None]
    migration_id: str = ""


def _hash_tree(root: Path) -> str | None:
    """A digest of every entry under ``root`` (relative path, kind, contents; a link's target, never
    followed; a big file, and every file once :data:`HASHED_TREE_BYTES` were read, by size and mtime); None
    when the tree has too many entries or cannot be read."""
    h = hashlib.sha256()
    count = 0
    read = 0
    stack = [""]
    while stack:
        rel = stack.pop()
        try:
            with os.scandir(root / rel if rel else root) as it:
                entries = sorted(it, key=lambda e: e.name)
        except OSError as exc:
            logger.debug("cannot key %s: %s", root / rel, exc)
            return None
        for e in entries:
            count += 1
            if count > MAX_TREE_FILES:
                return None
            path = f"{rel}/{e.name}" if rel else e.name
            try:
                st = e.stat(follow_symlinks=False)
                if stat.S_ISLNK(st.st_mode):
                    h.update(f"L {path}\0{os.readlink(e.path)}\0".encode("utf-8", "surrogateescape"))
                elif stat.S_ISDIR(st.st_mode):
                    h.update(f"D {path}\0".encode("utf-8", "surrogateescape"))
                    stack.append(path)
                elif stat.S_ISREG(st.st_mode) and st.st_size <= HASHED_FILE_BYTES and read < HASHED_TREE_BYTES:
                    read += st.st_size
                    fd = os.open(e.path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
                    with os.fdopen(fd, "rb") as fh:
                        digest = hashlib.sha256(fh.read(HASHED_FILE_BYTES + 1)).hexdigest()
                    h.update(f"F {path}\0{digest}\0".encode("utf-8", "surrogateescape"))
                else:
                    h.update(f"S {path}\0{st.st_mode:o} {st.st_size} {st.st_mtime_ns}\0".encode(
                        "utf-8", "surrogateescape"))
            except OSError as exc:
                logger.debug("cannot key %s: %s", e.path, exc)
                return None
    return h.hexdigest()


@lru_cache(maxsize=1)
def _guest_code() -> str:
    """Ferry's child-side code and the torch it runs with, as a digest (sizes and mtimes: it is Ferry's own)."""
    root = Path(__file__).resolve().parents[2]
    h = hashlib.sha256()
    for name in _GUEST_TREES:
        top = root / name
        files = [top] if top.is_file() else sorted(top.rglob("*.py")) if top.is_dir() else []
        for f in files:
            try:
                st = f.stat()
            except OSError:
                continue
            h.update(f"{f.relative_to(root)} {st.st_size} {st.st_mtime_ns}\n".encode())
    try:
        torch_version = metadata.version("torch")
    except metadata.PackageNotFoundError:
        torch_version = "none"
    h.update(f"torch {torch_version} python {sys.version} {sys.executable}\n".encode())
    return h.hexdigest()


def cache_key(opts: MigrationOptions, role: str, extra_env: dict[str, str] | None = None) -> str | None:
    """The key of ``role``'s run of the original (``reference``): the source tree's digest, the command and
    everything of the environment the run depends on; None when the tree cannot be keyed (too big, unreadable)."""
    tree = _hash_tree(Path(opts.source))
    if tree is None:
        return None
    python: object = None
    if opts.python:
        try:
            st = os.stat(opts.python)
            python = [opts.python, st.st_size, st.st_mtime_ns]
        except OSError:
            return None
    facts = {"format": FORMAT, "role": role, "tree": tree, "command": opts.run_command, "cwd": opts.cwd,
             "env": sorted(opts.env.items()), "extra_env": sorted((extra_env or {}).items()), "python": python,
             "seed": opts.seed, "disk": opts.disk_limit_bytes, "ferry": _guest_code(),
             # the threads it computed on (sandbox.hostmem.side_by_side_threads): a reduction may round otherwise
             "threads": [hostmem.side_by_side_threads(), os.environ.get("OMP_NUM_THREADS")]}
    return hashlib.sha256(json.dumps(facts, sort_keys=True).encode()).hexdigest()[:40]


def cache_root(state_dir: str | Path) -> Path:
    return run_cache_root(state_dir)


def _own_dir(path: Path) -> bool:
    """A real directory (not a link) of this user's."""
    try:
        st = os.lstat(path)
    except OSError:
        return False
    return stat.S_ISDIR(st.st_mode) and st.st_uid == os.geteuid()


def _plain_tree(root: Path) -> list[str] | None:
    """The regular files under ``root`` (relative), or None when anything in it is not a plain directory or
    regular file (a link, a FIFO, a device) or there are too many."""
    found: list[str] = []
    stack = [""]
    while stack:
        rel = stack.pop()
        try:
            with os.scandir(root / rel if rel else root) as it:
                entries = list(it)
        except OSError:
            return None
        for e in entries:
            path = f"{rel}/{e.name}" if rel else e.name
            try:
                mode = e.stat(follow_symlinks=False).st_mode
            except OSError:
                return None
            if stat.S_ISDIR(mode):
                stack.append(path)
            elif stat.S_ISREG(mode):
                found.append(path)
                if len(found) > MAX_ENTRY_FILES:
                    return None
            else:
                logger.warning("kept run %s holds %s, which is not a plain file or directory; not used", root, path)
                return None
    return found


def _copy_tree(src: Path, files: list[str], dest: Path) -> None:
    """``files`` of ``src`` into ``dest``, never following a link (the file lists come from
    :func:`_plain_tree`). Copies, not hard links: the dump readers refuse a file with a second link."""
    for rel in files:
        target = dest / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(src / rel, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
        with os.fdopen(fd, "rb") as fin, open(target, "xb") as fout:
            shutil.copyfileobj(fin, fout, 1 << 20)


def _relative(path: Path | None, base: Path) -> str | None:
    if path is None:
        return None
    try:
        return Path(path).relative_to(base).as_posix()
    except ValueError:
        return None


def _inside(rel: str | None, base: Path) -> Path | None:
    """``base/rel`` for a plain relative path (no ``..``, not absolute), else None."""
    if rel is None:
        return None
    p = PurePosixPath(rel)
    if p.is_absolute() or not p.parts or any(part in ("..", "") for part in p.parts) or "\0" in rel:
        raise ValueError(f"path {rel!r} leads out of the kept run")
    return base.joinpath(*p.parts)


def store(state_dir: str | Path, key: str, role: str, run: RunResult, migration_id: str = "") -> bool:
    """Keep a passing run (its artifacts dir: the collected probe, the redirect log, its output) under
    ``key``; True when it was kept. Never fails the migration: a problem is logged and the run not kept."""
    adir = run.artifacts_dir
    if not run.ok or adir is None:
        return False
    root = cache_root(state_dir)
    tmp = root / f".tmp-{secrets.token_hex(6)}"
    try:
        root.mkdir(parents=True, exist_ok=True)
        if not _own_dir(root):
            logger.warning("the run cache %s is not a directory of this user's; not keeping the run", root)
            return False
        collected = Path(adir) / "collected"
        files = _plain_tree(collected) if collected.is_dir() else []
        if files is None:
            return False
        tmp.mkdir(mode=0o700)
        _copy_tree(collected, files, tmp / "collected")
        for name in ("stdout.txt", "stderr.txt"):
            if (Path(adir) / name).is_file():
                _copy_tree(Path(adir), [name], tmp)
        paths = {f: _relative(getattr(run, f), Path(adir)) for f in PATH_FIELDS}
        kept = run.model_copy(update={f: None for f in (*PATH_FIELDS, "artifacts_dir", "workspace")})
        entry = CacheEntry(format=FORMAT, key=key, role=role, result=kept, paths=paths, migration_id=migration_id)
        (tmp / ENTRY_FILE).write_text(entry.model_dump_json(), encoding="utf-8")
        final = root / key
        if os.path.lexists(final):
            _drop(final)
        os.rename(tmp, final)
        _prune(root)
        return True
    except OSError as exc:
        logger.warning("could not keep the %s run for later migrations: %s", role, exc)
        shutil.rmtree(tmp, ignore_errors=True)
        return False


def _drop(path: Path) -> None:
    if path.is_symlink() or not path.is_dir():
        path.unlink(missing_ok=True)
    else:
        shutil.rmtree(path, ignore_errors=True)


def _prune(root: Path) -> None:
    """Keep the :data:`KEPT` most recently used entries."""
    try:
        entries = [e for e in os.scandir(root) if not e.name.startswith(".")]
        entries.sort(key=lambda e: e.stat(follow_symlinks=False).st_mtime, reverse=True)
    except OSError:
        return
    for e in entries[KEPT:]:
        _drop(Path(e.path))


def restore(state_dir: str | Path, key: str, role: str, adir: Path) -> RunResult | None:
    """The run kept under ``key``, copied into the migration's artifacts dir ``adir`` (its paths rebased
    there, ``result.json`` and :data:`REUSED_FILE` written) so that it reads as this migration's own; None
    when there is none or it is not a sound entry (which is then dropped)."""
    root = cache_root(state_dir)
    entry_dir = root / key
    if not os.path.lexists(entry_dir):
        return None
    if not _own_dir(root):
        logger.warning("the run cache %s is not a directory of this user's; not used", root)
        return None
    if not _own_dir(entry_dir):
        logger.warning("kept run %s is not a directory of this user's; not used", entry_dir)
        _drop(entry_dir)
        return None
    try:
        files = _plain_tree(entry_dir)
        if files is None or ENTRY_FILE not in files:
            raise ValueError("not a plain tree with an entry.json")
        fd = os.open(entry_dir / ENTRY_FILE, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
        with os.fdopen(fd, "rb") as fh:
            raw = fh.read(MAX_ENTRY_JSON + 1)
        if len(raw) > MAX_ENTRY_JSON:
            raise ValueError("entry.json is too big")
        entry = CacheEntry.model_validate_json(raw)
        if entry.format != FORMAT or entry.key != key or entry.role != role or not entry.result.ok:
            raise ValueError("entry.json does not describe a passing run under this key")
        rebased = {f: _inside(entry.paths.get(f), adir) for f in PATH_FIELDS}
        for f in ("redirect_log_path", "junit_xml"):
            rel = entry.paths.get(f)
            if rel is not None and rel not in files:
                raise ValueError(f"{f} {rel} is not in the kept run")
    except (OSError, ValueError, ValidationError) as exc:
        logger.warning("kept run %s is not sound (%s); the run is made again", entry_dir, str(exc)[:300])
        _drop(entry_dir)
        return None
    try:
        adir.mkdir(parents=True, exist_ok=True)
        for name in ("child", "collected", "stdout.txt", "stderr.txt", "result.json", REUSED_FILE):
            if os.path.lexists(adir / name):
                _drop(adir / name)
        _copy_tree(entry_dir, [f for f in files if f.startswith("collected/")], adir)
        _copy_tree(entry_dir, [f for f in files if f in ("stdout.txt", "stderr.txt")], adir)
        for f in ("probe_dir", "profile_dir"):
            d = rebased[f]
            if d is not None:
                d.mkdir(parents=True, exist_ok=True)
        run = entry.result.model_copy(update={**rebased, "artifacts_dir": adir.resolve(), "workspace": None})
        (adir / REUSED_FILE).write_text(json.dumps({"key": key, "role": role, "from": entry.migration_id}),
                                        encoding="utf-8")
        (adir / "result.json").write_text(run.model_dump_json(indent=2), encoding="utf-8")
        os.utime(entry_dir)  # recently used: pruned last
    except OSError as exc:
        logger.warning("could not use the kept %s run: %s", role, exc)
        return None
    logger.info("the %s run is the one kept from migration %s (same source, command and settings)", role,
                entry.migration_id or "?")
    return run


def reused_from(adir: Path | None) -> str | None:
    """The migration whose kept run ``adir`` holds ("" when it is not known), None when it holds its own run."""
    if adir is None:
        return None
    path = Path(adir) / REUSED_FILE
    if path.is_symlink() or not path.is_file():
        return None
    try:
        data = json.loads(path.read_text(encoding="utf-8")[:4096])
    except (OSError, ValueError):
        return ""
    return str(data.get("from") or "") if isinstance(data, dict) else ""


def kept(opts: MigrationOptions, role: str, adir: Path, extra_env: dict[str, str] | None = None) -> RunResult | None:
    """``role``'s run of the original that an earlier migration of the same source, command and settings
    kept, copied into ``adir``; None when there is none (or the tree cannot be keyed)."""
    key = cache_key(opts, role, extra_env)
    return None if key is None else restore(opts.state_dir, key, role, adir)


def keep(opts: MigrationOptions, role: str, run: RunResult, migration_id: str,
         extra_env: dict[str, str] | None = None) -> bool:
    """Keep a passing run of the original for later migrations (not one that was itself kept)."""
    if not run.ok or reused_from(run.artifacts_dir) is not None:
        return False
    key = cache_key(opts, role, extra_env)
    return key is not None and store(opts.state_dir, key, role, run, migration_id)
