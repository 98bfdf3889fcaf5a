"""The scrubbed environment a sandboxed child receives (an allow-list, never a deny-list)."""

from __future__ import annotations

import logging
import re

logger = logging.getLogger(__name__)

# Variables copied from the parent when present. Everything else is dropped.
ALLOWED_FROM_PARENT: tuple[str, ...] = (
    "LANG",
    "LC_ALL",
    "LC_CTYPE",
    "TZ",
    "TERM",
    "OMP_NUM_THREADS",
    "MKL_NUM_THREADS",
)

# Keys a caller may add explicitly (prefix match), unless they look like a secret.
CALLER_PREFIXES: tuple[str, ...] = ("FERRY_", "TPX_")

# a database address carries its password (postgresql://user:PASSWORD@host/db): FERRY_DATABASE_URL,
# FERRY_SERVICE_DATABASE, *_DSN
_SECRET = re.compile(r"(TOKENS?|SECRETS?|PASSWORDS?|PASSWD|CREDENTIALS?|API_KEYS?|_KEYS?|DATABASE_URL|_DATABASE|_DSN)$"
                     r"|^(OPENAI|ANTHROPIC|AWS|GITHUB|GH)_", re.I)


def is_secret_name(name: str) -> bool:
    """True for names that look like credentials (``*_TOKEN``, ``*_KEY``, ``OPENAI_*``...)."""
    return bool(_SECRET.search(name))


def scrubbed_env(
    parent: dict[str, str],
    extra: dict[str, str] | None = None,
    *,
    home: str = "/tmp",
    path: str = "/usr/local/bin:/usr/bin:/bin",
    tmp: str = "/tmp",
) -> dict[str, str]:
    """Build the child's environment.

    ``extra`` holds variables the sandbox itself sets (PYTHONPATH, FERRY_SEED...). Secret-looking
    names are refused even there, so a caller cannot forward a token by accident.
    """
    env = {k: parent[k] for k in ALLOWED_FROM_PARENT if k in parent}
    env.update({"HOME": home, "PATH": path, "TMPDIR": tmp, "PYTHONDONTWRITEBYTECODE": "1"})
    for key, value in (extra or {}).items():
        if is_secret_name(key):
            logger.warning("sandbox: refusing to pass secret-looking variable %s to the child", key)
            continue
        env[key] = value
    return env


def filter_caller_env(env: dict[str, str]) -> tuple[dict[str, str], list[str]]:
    """Keep only ``FERRY_*``/``TPX_*`` keys that are not secrets; return (kept, dropped names)."""
    kept: dict[str, str] = {}
    dropped: list[str] = []
    for key, value in env.items():
        if key.startswith(CALLER_PREFIXES) and not is_secret_name(key):
            kept[key] = value
        else:
            dropped.append(key)
    return kept, dropped
