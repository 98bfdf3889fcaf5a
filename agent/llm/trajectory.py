"""A migration's trajectory: every model request, reply and tool call, one JSON line each.

``trajectory.jsonl`` lies next to ``result.json`` (the migration's ``out`` artifacts and ``--out``).
Its first line is a :class:`Header` (schema version, model, the server's address without
credentials, Ferry's version, the migration's options); each further line is one event: a
:class:`RequestEvent` (the messages as sent), a :class:`ReplyEvent` (content, tool calls, tokens,
cost, seconds), a :class:`FailureEvent`, a :class:`ToolEvent` (a tool call's arguments and Ferry's
observation) or a :class:`CostStopEvent`. Secrets are scrubbed before a line is written
(:class:`Scrubber`). A trajectory read back is user input (``ferry replay``, ``ferry trajectory``):
:func:`read_trajectory` checks every line and names the one that is wrong.
"""

from __future__ import annotations

import json
import logging
import os
import re
import threading
from collections.abc import Iterable, Mapping
from datetime import UTC, datetime
from pathlib import Path
from typing import Annotated, Any, Literal
from urllib.parse import urlsplit, urlunsplit

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, ValidationError

from agent.migration.paths import TRAJECTORY_FILE, run_artifacts

logger = logging.getLogger(__name__)

SCHEMA_VERSION = 1
FILE_NAME = TRAJECTORY_FILE
HIDDEN = "***"


class _Event(BaseModel):
    model_config = ConfigDict(extra="forbid")


class Header(_Event):
    kind: Literal["header"] = "header"
    schema_version: int
    ferry_version: str
    model: str
    base_url: str | None = Field(description="the server's address, credentials and query left out")
    migration_id: str | None = None
    started: str = Field(description="ISO 8601, UTC")
    options: dict[str, Any] = Field(default_factory=dict, description="MigrationOptions, scrubbed")


class RequestEvent(_Event):
    kind: Literal["request"] = "request"
    n: int = Field(ge=1, description="the request's number in the migration (1 first)")
    node: str | None = None
    messages: list[dict[str, Any]]
    tools: list[str] = Field(default_factory=list, description="the names of the tools offered")
    max_completion_tokens: int | None = None


class RecordedCall(BaseModel):
    id: str
    name: str
    arguments: str = ""


class ReplyEvent(_Event):
    kind: Literal["reply"] = "reply"
    n: int = Field(ge=1)
    content: str | None = None
    tool_calls: list[RecordedCall] = Field(default_factory=list)
    prompt_tokens: int = Field(default=0, ge=0)
    completion_tokens: int = Field(default=0, ge=0)
    cost_usd: float | None = None
    wall_s: float = Field(default=0.0, ge=0)


class FailureEvent(_Event):
    kind: Literal["failure"] = "failure"
    n: int = Field(ge=1)
    failure: str = Field(description="agent.llm.client.FAILURE_KINDS")
    status: int | None = Field(default=None, description="the HTTP status, when the server answered one")
    message: str = ""
    wall_s: float = Field(default=0.0, ge=0)


class ToolEvent(_Event):
    kind: Literal["tool"] = "tool"
    n: int = Field(ge=1, description="the request whose reply made the call")
    id: str
    name: str
    arguments: str = ""
    observation: str = Field(description="what Ferry answered the model")
    wall_s: float = Field(default=0.0, ge=0)


class CostStopEvent(_Event):
    kind: Literal["cost_cap"] = "cost_cap"
    spent_usd: float
    cap_usd: float
    next_worst_usd: float = Field(description="the worst-case cost of the request that was not sent")


Event = Annotated[RequestEvent | ReplyEvent | FailureEvent | ToolEvent | CostStopEvent, Field(discriminator="kind")]
_EVENT: TypeAdapter[Any] = TypeAdapter(Event)


class Trajectory(BaseModel):
    path: str
    header: Header
    events: list[RequestEvent | ReplyEvent | FailureEvent | ToolEvent | CostStopEvent]

    def replies(self) -> list[ReplyEvent | FailureEvent]:
        """What the server answered, in order (what ``ferry replay`` serves)."""
        return [e for e in self.events if isinstance(e, ReplyEvent | FailureEvent)]

    def requests(self) -> list[RequestEvent]:
        return [e for e in self.events if isinstance(e, RequestEvent)]

    def tool_sequence(self) -> list[str]:
        """``name(arguments)`` of every tool call the model made, in order (what ``--compare`` diffs)."""
        return [f"{c.name}({c.arguments})" for e in self.events if isinstance(e, ReplyEvent) for c in e.tool_calls]


class TrajectoryError(ValueError):
    """A trajectory that cannot be read: which file, which line, what is wrong and what to do."""


# --- secrets out ------------------------------------------------------------------------------------

_SECRET_NAME = re.compile(r"(?i)(KEY|TOKEN|SECRET|PASSWORD|PASSWD)")
_BEARER = re.compile(r"(?i)\b(bearer\s+)[A-Za-z0-9._~+/=-]{8,}")
_KEY_SHAPED = re.compile(r"\b(sk|pk|rk|ghp|gho|ghs|github_pat|xox[abp])[-_][A-Za-z0-9_-]{12,}\b")


def public_url(url: str | None) -> str | None:
    """``url`` without user-info, query or fragment (where credentials travel)."""
    if not url:
        return url
    parts = urlsplit(url)
    host = parts.hostname or ""
    if parts.port:
        host = f"{host}:{parts.port}"
    return urlunsplit((parts.scheme, host, parts.path, "", ""))


class Scrubber:
    """Hides the API key, the values of variables named like secrets (``*KEY*``, ``*TOKEN*``,
    ``*SECRET*``, ``*PASSWORD*``) of the environment and of the user's ``--env``, bearer tokens and
    key-shaped strings; the user's home directory becomes ``~``."""

    def __init__(self, secrets: Iterable[str] = (), environ: Mapping[str, str] | None = None,
                 home: str | None = None) -> None:
        env = os.environ if environ is None else environ
        found = {s for s in secrets if s and len(s) >= 4}
        found |= {v for k, v in env.items() if _SECRET_NAME.search(k) and v and len(v) >= 4}
        self.secrets = sorted(found, key=len, reverse=True)
        home = home if home is not None else os.path.expanduser("~")
        self.home = home.rstrip("/") if home and home not in ("/", "~") else None

    def text(self, value: str) -> str:
        for secret in self.secrets:
            value = value.replace(secret, HIDDEN)
        value = _BEARER.sub(lambda m: m[1] + HIDDEN, value)
        value = _KEY_SHAPED.sub(HIDDEN, value)
        if self.home:
            value = re.sub(re.escape(self.home) + r"(?=/|\b|$)", "~", value)
        return value

    def value(self, value: Any) -> Any:
        if isinstance(value, str):
            return self.text(value)
        if isinstance(value, dict):
            return {k: self.value(v) for k, v in value.items()}
        if isinstance(value, list | tuple):
            return [self.value(v) for v in value]
        return value


# --- writing ----------------------------------------------------------------------------------------

def ferry_version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("ferry")
    except PackageNotFoundError:
        return "unknown"


class Recorder:
    """Appends events to ``path`` (the header first, when the file is new); a write that fails is
    logged, never the migration's end. Requests are numbered on from the lines already there, so a
    resumed migration's trajectory goes on in the same file."""

    def __init__(self, path: Path, header: Header, scrubber: Scrubber, node: str | None = None) -> None:
        self.path = path
        self.scrubber = scrubber
        self.node = node
        self._lock = threading.Lock()
        self.n = 0
        try:
            if path.is_file():
                self.n = sum(1 for line in path.read_text(encoding="utf-8").splitlines()
                             if line.startswith('{"kind":"request"'))
            else:
                path.parent.mkdir(parents=True, exist_ok=True)
                self._write(header)
        except OSError as exc:
            logger.warning("cannot record the trajectory in %s: %s", path, exc)

    def _write(self, event: BaseModel) -> None:
        data = self.scrubber.value(event.model_dump(mode="json"))
        line = json.dumps(data, ensure_ascii=False, separators=(",", ":"))
        with self._lock:
            try:
                with self.path.open("a", encoding="utf-8") as fh:
                    fh.write(line + "\n")
            except OSError as exc:
                logger.warning("cannot record the trajectory in %s: %s", self.path, exc)

    def request(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None,
                max_completion_tokens: int | None) -> int:
        self.n += 1
        names = [str((t.get("function") or {}).get("name", "")) for t in tools or []]
        self._write(RequestEvent(n=self.n, node=self.node, messages=messages, tools=names,
                                 max_completion_tokens=max_completion_tokens))
        return self.n

    def write(self, event: BaseModel) -> None:
        self._write(event)


def new_header(*, model: str, base_url: str | None, migration_id: str | None,
               options: Mapping[str, Any] | None = None) -> Header:
    return Header(schema_version=SCHEMA_VERSION, ferry_version=ferry_version(), model=model,
                  base_url=public_url(base_url), migration_id=migration_id,
                  started=datetime.now(UTC).isoformat(timespec="seconds"), options=dict(options or {}))


# --- reading ----------------------------------------------------------------------------------------

def _problem(exc: ValidationError) -> str:
    first = exc.errors(include_url=False)[0]
    where = ".".join(str(p) for p in first["loc"])
    return f"{where}: {first['msg']}" if where else str(first["msg"])


def read_trajectory(path: Path) -> Trajectory:
    """The trajectory in ``path``, every line checked; TrajectoryError names the line and what to do."""
    hint = (f"a trajectory is the {FILE_NAME} Ferry writes next to result.json; record it again with "
            "`ferry migrate --llm` or fix the line")
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError) as exc:
        raise TrajectoryError(f"cannot read the trajectory {path}: {exc}") from None
    if not lines or not lines[0].strip():
        raise TrajectoryError(f"{path} is empty: {hint}")
    parsed: list[Any] = []
    for i, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            data = json.loads(line)
        except json.JSONDecodeError as exc:
            raise TrajectoryError(f"{path}, line {i}: not JSON ({exc.msg} at column {exc.colno}): {hint}") from None
        if i == 1:
            if not isinstance(data, dict) or data.get("kind") != "header":
                raise TrajectoryError(f"{path}, line 1: the first line must be the header "
                                      f"(kind \"header\"): {hint}")
            version = data.get("schema_version")
            if version != SCHEMA_VERSION:
                raise TrajectoryError(f"{path}, line 1: schema version {version!r}, this Ferry reads version "
                                      f"{SCHEMA_VERSION}: record it again with this Ferry")
            try:
                parsed.append(Header.model_validate(data))
            except ValidationError as exc:
                raise TrajectoryError(f"{path}, line 1: a bad header ({_problem(exc)}): {hint}") from None
            continue
        try:
            parsed.append(_EVENT.validate_python(data))
        except ValidationError as exc:
            raise TrajectoryError(f"{path}, line {i}: not an event of a trajectory ({_problem(exc)}): {hint}") from None
    header, events = parsed[0], parsed[1:]
    return Trajectory(path=str(path), header=header, events=events)


def trajectory_path(state_dir: str | Path, migration_id: str) -> Path:
    """Where the migration ``migration_id`` records its trajectory (its ``out`` artifacts)."""
    return run_artifacts(state_dir, migration_id, "out") / FILE_NAME


def find_trajectory(ref: str, state_dir: str | Path) -> Path:
    """``ref``: a trajectory file, a folder holding one (an ``--out``), or a migration id in ``state_dir``."""
    given = Path(ref).expanduser()
    if given.is_file():
        return given
    if given.is_dir():
        if (given / FILE_NAME).is_file():
            return given / FILE_NAME
        raise TrajectoryError(f"{ref} holds no {FILE_NAME}: only a migration with a model records one")
    from agent.ids import id_problem

    if id_problem(ref) is None:
        path = trajectory_path(state_dir, ref)
        if path.is_file():
            return path
        raise TrajectoryError(f"migration {ref} has no trajectory in {state_dir} ({path} is missing): only a "
                              "migration with a model records one; pass --state-dir if it ran with another")
    raise TrajectoryError(f"{ref!r} is neither a trajectory file, a folder holding {FILE_NAME}, nor a migration id")
