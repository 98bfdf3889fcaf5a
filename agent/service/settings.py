"""The service's configuration: flags and environment alike (``ferry serve`` reads both)."""

from __future__ import annotations

import os
import re
import socket
import uuid
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from agent.prbot.github.config import GitHubConfig
from agent.service.origins import host_entry
from agent.service.uploads import UploadLimits
from agent.settings import (
    DEFAULT_BODY_IDLE_S,
    DEFAULT_BODY_TOTAL_S,
    DEFAULT_HEADER_S,
    DEFAULT_LEASE_S,
    settings,
    settings_of,
)
from agent.settings import SettingsError as VariableError
from tools.repopath import repo_path_problem

TOKENS_ENV = "FERRY_API_TOKENS"
LEGACY_TOKEN_ENV = "FERRY_API_TOKEN"
DATA_DIR_ENV = "FERRY_DATA_DIR"
ALLOWED_HOSTS_ENV = "FERRY_ALLOWED_HOSTS"
DEFAULT_DATA_DIR = Path("~/.ferry/service")
LOCAL_OWNER = "local"
_OWNER = re.compile(r"[A-Za-z0-9_.@-]{1,64}")  # every caller's name when no token is configured (loopback only)


class SettingsError(VariableError):
    """A configuration value is wrong; the message names the flag or variable and what to give (a kind of
    agent.settings' SettingsError: one ``except`` catches a bad flag and a bad variable)."""


class ServiceSettings(BaseModel):
    model_config = ConfigDict(frozen=True, arbitrary_types_allowed=True)

    data_dir: Path = Field(description="sessions, their workspaces and outputs, the checkpoints, service.db")
    tokens: dict[str, str] = Field(default_factory=dict, description="bearer token -> its owner's name")
    allow_roots: tuple[Path, ...] = Field(default=(), description="server directories a JSON create may name")
    workers: int = Field(default_factory=lambda: os.cpu_count() or 1, ge=1)
    queue: int = Field(default=64, ge=1, description="sessions waiting for a worker before 429")
    uploads: UploadLimits = Field(default_factory=UploadLimits)
    pythons: tuple[str, ...] = Field(default=(), description="interpreters a session may name in python")
    allowed_hosts: tuple[tuple[str, int | None], ...] = Field(
        default=(), description="Host names (name, port or None: any) answered besides loopback and the bound "
                                "address (--allowed-host)")
    bind_host: str = Field(default="127.0.0.1", description="the address the server listens on")
    header_timeout_s: float = Field(default=DEFAULT_HEADER_S, gt=0, description="a request's line and headers "
                                                                                  "must arrive within this")
    body_idle_timeout_s: float = Field(default=DEFAULT_BODY_IDLE_S, gt=0, description="longest pause in a body")
    body_total_timeout_s: float = Field(default=DEFAULT_BODY_TOTAL_S, gt=0,
                                        description="longest time a request body may take in all")
    executor: Literal["thread", "ray"] = Field(default="thread", description="where a claimed session's "
                                              "migration runs: the worker thread, or a Ray task (--executor)")
    ray_address: str = Field(default="local", description="the Ray cluster: HOST:PORT, 'auto' or 'local' "
                                                          "(--ray-address)")
    ray_result_bytes: int = Field(default=512 * 1024**2, gt=0, description="what one Ray task may send back "
                                                                            "(its outputs and run artifacts)")
    database_url: str | None = Field(default=None, description="a postgresql:// URL: sessions, events and "
                                     "checkpoints there, shared by every server given the same (None: SQLite "
                                     "in the data dir, one server)")
    host_id: str = Field(default_factory=lambda: new_host_id(), description="this server's name in the leases it "
                                                                            "takes (Postgres)")
    lease_s: float = Field(default=DEFAULT_LEASE_S, gt=0, description="a claimed session's lease: renewed every "
                           "third of it; a session whose host missed it is queued again for another (Postgres)")
    github: GitHubConfig | None = Field(default=None, description="the PR bot's GitHub side (None: the webhook "
                                                                  "answers 503)")


def new_host_id() -> str:
    """This server's lease name: the host name, the pid and a random part (a restarted server is a new
    holder: the sessions its previous life held are requeued once their leases run out)."""
    return f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"


def parse_tokens(text: str, source: str = f"${TOKENS_ENV}") -> dict[str, str]:
    """``owner=token,token2``: each token with its owner (``default`` for a bare one)."""
    tokens: dict[str, str] = {}
    for n, part in enumerate((p.strip() for p in text.split(",")), start=1):
        if not part:
            continue
        owner, sep, token = part.partition("=")
        if not sep or not _OWNER.fullmatch(owner.strip()) or not token.strip("= "):  # a bare token (base64: '=')
            owner, token = "default", part
        owner, token = owner.strip(), token.strip()
        # entries are named by their place, never by their text: a message must not print a token
        if len(token) < 8:
            raise SettingsError(f"{source}: entry {n} has a token shorter than 8 characters; use a long random one")
        if token in tokens and tokens[token] != owner:
            raise SettingsError(f"{source}: entry {n} gives one token to a second owner ({tokens[token]!r}, "
                                f"{owner!r})")
        tokens[token] = owner
    return tokens


def tokens_from_env(environ: dict[str, str] | None = None) -> dict[str, str]:
    env = settings_of(environ).service
    tokens = parse_tokens(env.api_tokens)
    legacy = env.api_token
    if legacy:
        tokens.update(parse_tokens(legacy, f"${LEGACY_TOKEN_ENV}"))
    return tokens


def resolve_roots(roots: list[str]) -> tuple[Path, ...]:
    """Each ``--allow-root`` as the real directory it names (a link is resolved once, here)."""
    out: list[Path] = []
    for root in roots:
        path = Path(root).expanduser()
        if not path.is_dir():
            raise SettingsError(f"--allow-root {root}: not a directory on this server")
        real = path.resolve(strict=True)
        if real != Path("/") and repo_path_problem(real) is not None:
            raise SettingsError(f"--allow-root {root}: {repo_path_problem(real)}")
        if real == Path("/"):
            raise SettingsError("--allow-root /: allowing the whole filesystem lets any client read any file; "
                                "name the directories that hold repositories")
        out.append(real)
    return tuple(dict.fromkeys(out))


def data_dir_from(value: str | None) -> Path:
    raw = value or settings().service.data_dir or str(DEFAULT_DATA_DIR)
    path = Path(raw).expanduser().absolute()
    try:
        path.mkdir(parents=True, exist_ok=True)
        path.chmod(0o700)
    except OSError as exc:
        raise SettingsError(f"data dir {path}: {exc.strerror or exc}; give --data-dir (or ${DATA_DIR_ENV}) "
                            "a directory Ferry can create and write") from exc
    return path


def allowed_hosts(flags: list[str] | None, environ: dict[str, str] | None = None) -> tuple[tuple[str, int | None], ...]:
    """``--allowed-host`` (repeatable; wins) or ``$FERRY_ALLOWED_HOSTS`` (comma-separated) as host entries."""
    given = flags if flags is not None else settings_of(environ).service.allowed_host_list()
    source = "--allowed-host" if flags is not None else f"${ALLOWED_HOSTS_ENV}"
    out: list[tuple[str, int | None]] = []
    for value in given:
        try:
            out.append(host_entry(value))
        except ValueError as exc:
            raise SettingsError(f"{source}: {exc}") from None
    return tuple(dict.fromkeys(out))
