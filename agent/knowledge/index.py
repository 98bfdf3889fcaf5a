"""The SQLite FTS5 index of the knowledge base, and the query that searches it.

The index is one file, ``index.sqlite`` in the knowledge-base directory (``$FERRY_KB_PATH``, default
``~/.ferry/knowledge``), built lazily and keyed by a hash of its sources (the files the documents come
from, and the fixes table): a search that finds the key changed rebuilds it first. A build writes a
temporary file in the same directory and renames it over the index, so two processes building at
once each leave a complete index and a reader never sees half of one.

User text (a trace, an exception message) is never FTS syntax: it is cut into word tokens, each
quoted, OR-ed together, ranked by bm25 (title and identifier terms weigh more than prose, the
fixtures' code least).
"""

from __future__ import annotations

import hashlib
import logging
import os
import re
import sqlite3
import tempfile
from contextlib import closing
from dataclasses import dataclass
from pathlib import Path

from agent.errors import ToolUnavailable
from agent.knowledge.fixes import all_fixes, fixes_key
from agent.knowledge.sources import code_terms, default_checkout, gather, source_files
from agent.migration.paths import knowledge_dir

logger = logging.getLogger(__name__)

INDEX_FILE = "index.sqlite"
SCHEMA_VERSION = "1"
ENV_PATH = "FERRY_KB_PATH"
#: bm25 column weights: title, body, terms; the fixtures' table counts this much of its score
WEIGHTS = (3.0, 1.0, 4.0)
EXAMPLES_WEIGHT = 0.3
STRONG_WEIGHT = 2.0
MAX_QUERY_TOKENS = 48
KIND_LABELS = {"codemod": "codemod rule", "fix": "site fix", "policy": "policy rule", "tier": "numerics tier",
               "earlier_fix": "earlier fix"}
_STOP = """a an and are as at be by for from has have if in into is it its of on or that the this to was were will
with not no error file line most recent call last traceback py self none true false def return import"""
STOPWORDS = frozenset(_STOP.split())
_EXC_LINE = re.compile(r"^\s*([A-Za-z_][\w.]*(?:Error|Exception|Warning|Exit|Interrupt))\s*:\s*(.*)$", re.M)
_WORD = re.compile(r"\w+")
_FRAME = re.compile(r'File "[^"]*", line \d+(?:, in \S+)?')
_LIBRARY = ("site-packages", "dist-packages", "/lib/python", "<frozen")


def user_text(text: str) -> str:
    """``text`` without the frame lines of a traceback, and without the source lines of its library
    frames (torch's own code says nothing about the user's idiom)."""
    out: list[str] = []
    skip_source = False
    for line in text.splitlines():
        frame = _FRAME.search(line)
        if frame:
            skip_source = any(lib in frame.group(0) for lib in _LIBRARY)
            continue
        if skip_source and line.startswith("    "):
            skip_source = False
            continue
        skip_source = False
        out.append(line)
    return "\n".join(out)
_CAMEL = re.compile(r"[A-Z]{2,}s?(?![a-z])|[A-Z]?[a-z]+|[A-Z]+")


def words(text: str) -> list[str]:
    """The word tokens of ``text`` and the parts of its CamelCase words (``ProcessGroupNCCL`` ->
    also ``Process``, ``Group``, ``NCCL``)."""
    out = []
    for w in _WORD.findall(text):
        out.append(w)
        parts = _CAMEL.findall(w)
        if len(parts) > 1:
            out += parts
    return out


class KnowledgeError(ToolUnavailable):
    """The knowledge base cannot be built or searched here (no FTS5 in this sqlite3, an unwritable dir)."""


@dataclass(frozen=True)
class Match:
    kind: str
    id: str
    title: str
    text: str
    score: float
    example: str = ""  # a golden before/after diff of the rule or fix, an earlier fix's diff

    @property
    def label(self) -> str:
        return KIND_LABELS.get(self.kind, self.kind)

    def line(self) -> str:
        example = "\n  " + self.example.replace("\n", "\n  ") if self.example else ""
        return f"[{self.label}] {self.id}: {self.title} -- {self.text}{example}"


def default_dir() -> Path:
    """``$FERRY_KB_PATH``, else ``knowledge`` in Ferry's default state dir."""
    return knowledge_dir()


def signature_kinds(text: str) -> list[str]:
    """The trace signature kinds (``tools.trace.signatures``) of the exception lines in ``text``."""
    from tools.trace.signatures import classify

    pairs = [(m.group(1), m.group(2)) for m in _EXC_LINE.finditer(text)] or [("", text)]
    kinds = [classify(exc, msg).kind for exc, msg in pairs]
    return [k for k in dict.fromkeys(kinds) if k != "other"]


def query_tokens(text: str) -> tuple[list[str], list[str]]:
    """(identifier tokens, word tokens) of ``text``: the signature kinds of its exception lines and its
    code terms (specific: they weigh more), then the words of its exception lines and of the rest."""
    text = user_text(text)
    exc_lines = " ".join(m.group(0) for m in _EXC_LINE.finditer(text))
    seen: set[str] = set()

    def keep(tokens: list[str], room: int) -> list[str]:
        out: list[str] = []
        for tok in tokens:
            low = tok.lower()
            if len(out) >= room or low in seen or low in STOPWORDS or len(low) < 2 or low.isdigit():
                continue
            seen.add(low)
            out.append(low)
        return out

    strong = keep([*signature_kinds(text), *code_terms(text).split()], MAX_QUERY_TOKENS // 2)
    weak = keep([*words(exc_lines), *words(text)], MAX_QUERY_TOKENS - len(strong))
    return strong, weak


def _or(tokens: list[str]) -> str:
    return " OR ".join(f'"{t}"' for t in tokens)  # tokens are \w+ runs: quoted, never FTS syntax


def fts_query(text: str) -> str:
    """``text`` as one safe FTS5 query: its tokens quoted and OR-ed; '' when nothing is left to search."""
    strong, weak = query_tokens(text)
    return _or(strong + weak)


class KnowledgeBase:
    """The index in ``directory``, built from ``checkout``'s fixtures and docs (None: code only)."""

    def __init__(self, directory: Path, checkout: Path | None) -> None:
        self.directory = directory
        self.checkout = checkout
        self.path = directory / INDEX_FILE

    @classmethod
    def default(cls) -> KnowledgeBase:
        return cls(default_dir(), default_checkout())

    def key(self) -> str:
        h = hashlib.sha256(f"schema {SCHEMA_VERSION}\n".encode())
        h.update(Path(__file__).read_bytes())  # how the index is built
        for f in source_files(self.checkout):
            h.update(f"{f}\n".encode())
            h.update(f.read_bytes())
        h.update(f"fixes {fixes_key(self.directory)}".encode())
        return h.hexdigest()

    def _stored_key(self) -> str | None:
        if not self.path.is_file():
            return None
        try:
            with closing(sqlite3.connect(f"file:{self.path}?mode=ro", uri=True)) as conn:
                row = conn.execute("SELECT value FROM meta WHERE name = 'key'").fetchone()
        except sqlite3.Error:
            return None  # not an index (or an older one): rebuilt
        return str(row[0]) if row else None

    def ensure(self) -> Path:
        """The index, rebuilt first when its sources changed."""
        key = self.key()
        if self._stored_key() != key:
            self.build(key)
        return self.path

    def build(self, key: str | None = None) -> int:
        """Build the index from the sources; returns how many documents it holds."""
        key = key or self.key()
        docs = [*gather(self.checkout), *(f.document() for f in all_fixes(self.directory))]
        try:
            self.directory.mkdir(parents=True, exist_ok=True)
            fd, tmp = tempfile.mkstemp(prefix=".index-", suffix=".tmp", dir=self.directory)
        except OSError as exc:
            raise KnowledgeError(f"cannot write the knowledge base in {self.directory}: {exc}") from exc
        os.close(fd)
        try:
            with closing(sqlite3.connect(tmp)) as conn:
                try:
                    for table, columns in (("kb", "title, body, terms"), ("kb_examples", "examples")):
                        conn.execute(f"CREATE VIRTUAL TABLE {table} USING fts5({columns}, "
                                     "tokenize = \"unicode61 tokenchars '_'\")")
                except sqlite3.OperationalError as exc:
                    raise KnowledgeError(f"this Python's sqlite3 (SQLite {sqlite3.sqlite_version}) has no FTS5, "
                                         f"which the knowledge base needs: {exc}") from exc
                conn.execute("CREATE TABLE docs (rowid INTEGER PRIMARY KEY, kind TEXT, id TEXT, title TEXT, "
                             "summary TEXT, example TEXT)")
                for i, d in enumerate(docs, 1):
                    conn.execute("INSERT INTO docs VALUES (?, ?, ?, ?, ?, ?)",
                                 (i, d.kind, d.id, d.title, d.summary, d.example))
                    conn.execute("INSERT INTO kb (rowid, title, body, terms) VALUES (?, ?, ?, ?)",
                                 (i, d.title, d.body, d.terms))
                    if d.examples:
                        conn.execute("INSERT INTO kb_examples (rowid, examples) VALUES (?, ?)", (i, d.examples))
                conn.execute("CREATE TABLE meta (name TEXT PRIMARY KEY, value TEXT)")
                conn.execute("INSERT INTO meta VALUES ('key', ?)", (key,))
                conn.commit()
            os.chmod(tmp, 0o644)  # mkstemp makes it private; the index holds nothing secret
            os.replace(tmp, self.path)
        finally:
            if os.path.exists(tmp):
                os.unlink(tmp)
        logger.info("knowledge base: %d documents indexed in %s", len(docs), self.path)
        return len(docs)

    def search(self, text: str, k: int = 5) -> list[Match]:
        """The ``k`` best matches for free text (a trace, a message), best first."""
        try:
            return self._search(text, k)
        except (OSError, sqlite3.Error) as exc:  # an unreadable source, a damaged or unwritable index
            raise KnowledgeError(f"the knowledge base in {self.directory} cannot be searched: {exc}") from exc

    def _search(self, text: str, k: int) -> list[Match]:
        strong, weak = query_tokens(text)
        if not strong and not weak:
            return []
        path = self.ensure()
        scores: dict[int, float] = {}
        weights = ", ".join(map(str, WEIGHTS))
        # FTS5's bm25 normalises by a row's whole length, so the fixtures are a table of their own (long
        # fixtures would drown a rule's description); identifiers and signature kinds weigh more than words
        queries = [(f"SELECT rowid, bm25(kb, {weights}) FROM kb WHERE kb MATCH ?", _or(strong), STRONG_WEIGHT),
                   (f"SELECT rowid, bm25(kb, {weights}) FROM kb WHERE kb MATCH ?", _or(weak), 1.0),
                   ("SELECT rowid, bm25(kb_examples) FROM kb_examples WHERE kb_examples MATCH ?", _or(strong + weak),
                    EXAMPLES_WEIGHT)]
        with closing(sqlite3.connect(f"file:{path}?mode=ro", uri=True)) as conn:
            for sql, query, weight in queries:
                if not query:
                    continue
                for rowid, score in conn.execute(sql, (query,)):
                    scores[rowid] = scores.get(rowid, 0.0) + weight * float(score)
            best = sorted(scores, key=lambda r: (scores[r], r))[:k]
            if not best:
                return []
            marks = ", ".join("?" * len(best))
            rows: dict[int, tuple[str, ...]] = {r[0]: tuple(str(v) for v in r[1:]) for r in conn.execute(
                f"SELECT rowid, kind, id, title, summary, example FROM docs WHERE rowid IN ({marks})", best)}
        # bm25 is lower for better matches: the scores are negated so that higher is better
        return [Match(kind=rows[r][0], id=rows[r][1], title=rows[r][2], text=rows[r][3], score=round(-scores[r], 4),
                      example=rows[r][4]) for r in best]
