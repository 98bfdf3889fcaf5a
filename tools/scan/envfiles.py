"""CUDA environment variables (catalogue entry 17, rule FRY017) outside Python: shell scripts,
Dockerfiles, Makefiles, .env files and YAML job configs.

Which files: ``*.sh``/``*.bash`` and extensionless files with a sh/bash/dash/zsh/ksh shebang;
``Dockerfile``, ``Dockerfile.*``, ``*.dockerfile``, ``Containerfile``; ``Makefile``,
``makefile``, ``GNUmakefile``, ``*.mk``; ``.env``, ``.env.*``, ``*.env``; ``*.yaml``/``*.yml``.
What: every occurrence, outside comments, of a variable name the FRY017 table
(``tools.codemods.tables.CUDA_ENV_VARS`` and its ``NCCL_*``/``TORCH_NCCL_*`` families) lists, as
a whole word: ``export CUDA_VISIBLE_DEVICES=0``, ``ENV NCCL_DEBUG=INFO``, ``$CUDA_HOME``, YAML
``env:`` blocks (``CUDA_VISIBLE_DEVICES: "0"`` or ``- name: NCCL_DEBUG``) and commands in
``run:``/``script:`` values. Reported for review, never rewritten.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from tools import repofiles
from tools.codemods.base import ALL_TARGETS
from tools.codemods.tables import cuda_env_var

RULE_ID = "FRY017"
KIND_LABELS = {"shell": "shell script", "dockerfile": "Dockerfile", "makefile": "Makefile",
               "dotenv": ".env file", "yaml": "YAML config"}
_HEAD_BYTES = 128
_SHEBANG = re.compile(rb"^#![ \t]*(\S+)(?:[ \t]+(?:-S[ \t]+)?(\S+))?")
_SHELLS = frozenset({b"sh", b"bash", b"dash", b"zsh", b"ksh"})
_WORD = re.compile(r"(?<![A-Za-z0-9_])[A-Z][A-Z0-9_]*(?![A-Za-z0-9_])")


def kind_by_name(rel: str) -> str | None:
    """The env-file kind of a path from its name alone (None: not one, or needs the shebang)."""
    name = PurePosixPath(rel).name
    lower = name.lower()
    if lower.endswith((".sh", ".bash")):
        return "shell"
    if name in ("Dockerfile", "Containerfile") or name.startswith(("Dockerfile.", "Containerfile.")) \
            or lower.endswith(".dockerfile"):
        return "dockerfile"
    if name in ("Makefile", "makefile", "GNUmakefile") or lower.endswith(".mk"):
        return "makefile"
    if name == ".env" or name.startswith(".env.") or lower.endswith(".env"):
        return "dotenv"
    if lower.endswith((".yaml", ".yml")):
        return "yaml"
    return None


def may_have_shebang(rel: str) -> bool:
    """Extensionless files are checked for a shell shebang (a cheap read of the first bytes)."""
    name = PurePosixPath(rel).name
    return "." not in name.lstrip(".") and kind_by_name(rel) is None


def shell_shebang(head: bytes) -> bool:
    m = _SHEBANG.match(head)
    if m is None:
        return False
    interpreter = m.group(1).rsplit(b"/", 1)[-1]
    if interpreter == b"env" and m.group(2):
        interpreter = m.group(2).rsplit(b"/", 1)[-1]
    return interpreter in _SHELLS


def env_file_kind(root: Path, rel: str) -> str | None:
    """The kind of ``root/rel`` (reads the first bytes of extensionless files), or None."""
    kind = kind_by_name(rel)
    if kind is not None or not may_have_shebang(rel):
        return kind
    try:  # a FIFO never blocks, a link is not followed
        head = repofiles.read_bytes(root, rel, max_bytes=_HEAD_BYTES, head=True)
    except repofiles.RepoFileError:
        return None
    return "shell" if shell_shebang(head) else None


def _strip_hash_comment(line: str, *, shell_like: bool = True) -> str:
    """``line`` up to its ``#`` comment (columns of the code part are unchanged).

    ``shell_like`` (shell, Dockerfile, YAML, .env, make recipes): quotes are honoured and a
    ``#`` only starts a comment at the start of a word, so ``$#``, ``${#x}`` and ``a#b`` are
    kept; otherwise (make variables and rules) any ``#`` not escaped as ``\\#`` does."""
    quote: str | None = None
    prev = " "
    for i, ch in enumerate(line):
        if quote is not None:
            if ch == quote and (quote == "'" or prev != "\\"):
                quote = None
        elif shell_like and ch in ("'", '"') and prev != "\\":
            quote = ch
        elif ch == "#" and prev != "\\" and (not shell_like or prev.isspace()):
            return line[:i]
        prev = ch
    return line


def code_part(line: str, kind: str) -> str:
    if kind == "makefile" and not line.startswith("\t"):
        return _strip_hash_comment(line, shell_like=False)
    return _strip_hash_comment(line)


@dataclass(frozen=True)
class EnvHit:
    line: int
    col: int
    end_col: int
    name: str
    snippet: str
    message: str
    equivalent: str
    blocks: tuple[str, ...] = ALL_TARGETS


def scan_text(text: str, kind: str) -> list[EnvHit]:
    """Every CUDA-specific variable name in ``text`` (1-based line and column), comments skipped."""
    label = KIND_LABELS[kind]
    hits = []
    for number, line in enumerate(text.splitlines(), 1):
        code = code_part(line, kind)
        for m in _WORD.finditer(code):
            entry = cuda_env_var(m.group())
            if entry is None:
                continue
            hits.append(EnvHit(number, m.start() + 1, m.end() + 1, m.group(), line.strip(),
                               f"{m.group()} in a {label} {entry.reason}; it has no effect on tpx/CPU",
                               entry.equivalent))
    return hits
