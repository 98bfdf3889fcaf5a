"""Every ``FERRY_*`` environment variable Ferry's host side reads: its name, default and validation.

Read through one cached accessor, :func:`settings` (or :func:`settings_of` for a given mapping)::

    settings().llm.model            # $FERRY_LLM_MODEL
    settings().service.queue        # $FERRY_QUEUE, else 64
    settings().paths.state_dir      # $FERRY_STATE_DIR

The variables are grouped by the part of Ferry that reads them (``llm``, ``service``, ``github``,
``paths``, ``git``, ``evals``); each group is a pydantic-settings model, validated when it is first
read, so a bad value of one part (``$FERRY_QUEUE=nan``) stops the commands that read it and not the
others, as each reader did on its own before. An unset, empty or blank variable is the default; a
value is read without its surrounding blanks. A bad value raises :class:`SettingsError`, whose message
names the variable and what it accepts.

The accessor is cached on the variables' values: a changed environment (a test's ``monkeypatch``,
``ferry serve`` started with other variables) is read again.

The settings of the code that runs inside the user's program (tools/probe, tools/redirect, the
profile's child code, the runner's bootstrap, backend/) are not here: that code imports no pydantic and
reads its own variables. Neither are those of tools/ and sandbox/ (``FERRY_DISK_LIMIT``,
``FERRY_PARALLEL_RUNS``, ``FERRY_WARM_RUNS``, ``FERRY_SANDBOX_ISOLATION``, ``FERRY_DOCS_URL``...): they
sit below agent/ and read theirs through :mod:`sandbox.envvars`.
"""

from __future__ import annotations

import functools
import math
import os
from collections.abc import Callable, Mapping
from contextvars import ContextVar
from pathlib import Path
from typing import Annotated, Any, ClassVar, Literal, Self

from pydantic import BaseModel, BeforeValidator, Field, SecretStr, ValidationError
from pydantic.fields import FieldInfo
from pydantic_settings import BaseSettings, EnvSettingsSource, PydanticBaseSettingsSource, SettingsConfigDict

#: the variables :func:`settings` reads (and caches on): Ferry's own, and the model key's usual name
PREFIXES = ("FERRY_",)
OTHER_NAMES = ("OPENAI_API_KEY",)

# the service's HTTP deadlines (agent.service.deadlines applies them)
DEFAULT_HEADER_S = 30.0
DEFAULT_BODY_IDLE_S = 60.0
DEFAULT_LEASE_S = 30.0  # ferry serve --lease: a claimed session's lease on Postgres
DEFAULT_BODY_TOTAL_S = 600.0

MAX_INT = 2**63 - 1
MAX_SECONDS = 10 * 365 * 86400.0  # past ten years a time limit is a typo (and overflows timers)
_MAX_CHARS = 64


class SettingsError(ValueError):
    """A variable's value cannot be read; the message names it and what it accepts (never a secret)."""

    def __init__(self, message: str, name: str = "") -> None:
        super().__init__(message)
        self.name = name


# -- what a number's variable accepts (the same words as the CLI's flags: agent.cli.numbers) ---------

def _shown(raw: str) -> str:
    return repr(raw) if len(raw) <= 40 else repr(raw[:40]) + "..."


def _plain(value: object) -> str:
    raw = str(value).strip()
    if len(raw) > _MAX_CHARS:
        raise ValueError(f"must be a plain number, got {len(raw)} characters ({_shown(raw)})")
    return raw


def whole_number(low: int) -> Callable[[object], int]:
    """A whole number of ``low`` or more (no ``1e3``, no ``1.5``, no ``nan``)."""
    what = f"a whole number of {low} or more"

    def parse(value: object) -> int:
        if isinstance(value, int) and not isinstance(value, bool):
            raw = str(value)
        else:
            raw = _plain(value)
        body = raw[1:] if raw[:1] in "+-" else raw
        if not body.isdigit() or len(body) > 30 or not low <= int(raw) <= MAX_INT:
            raise ValueError(f"must be {what}, got {_shown(raw)}")
        return int(raw)

    return parse


def seconds(value: object) -> float:
    """A time limit: a finite number of seconds above 0 and at most ten years."""
    raw = _plain(value)
    try:
        number = float(raw)
    except ValueError:
        raise ValueError(f"must be a number above 0, got {_shown(raw)}") from None
    if not math.isfinite(number) or number <= 0:
        raise ValueError(f"must be a finite number above 0, got {_shown(raw)}")
    if number > MAX_SECONDS:
        raise ValueError(f"must be at most {MAX_SECONDS:.0f} seconds, got {_shown(raw)}")
    return number


PositiveInt = Annotated[int, BeforeValidator(whole_number(1))]
Seconds = Annotated[float, BeforeValidator(seconds)]


# -- the model's limits: a flag of ferry migrate / ferry eval, else its variable, else the default ----

class LLMLimits(BaseModel):
    """How long and how much: every field has a flag of ``ferry migrate`` and an environment variable."""

    request_timeout_s: float = Field(default=60.0, gt=0, allow_inf_nan=False,
                                     description="one request, capped by the wall budget left")
    max_retries: int = Field(default=4, ge=0, description="retries of a timeout, 429, 5xx or refused connection")
    backoff_s: float = Field(default=1.0, ge=0, allow_inf_nan=False, description="first backoff; doubles each retry")
    max_wall_s: float = Field(default=900.0, gt=0, allow_inf_nan=False,
                              description="all the model's use in one migration")
    max_calls: int = Field(default=30, ge=1)
    max_tokens: int = Field(default=200_000, ge=1)
    max_reply_chars: int = Field(default=200_000, ge=1, description="a reply's content or one tool call's arguments")


DEFAULTS = LLMLimits()

# field -> (flag of ferry migrate / ferry eval, environment variable)
LIMIT_SOURCES: dict[str, tuple[str, str]] = {
    "request_timeout_s": ("--llm-timeout", "FERRY_LLM_TIMEOUT_S"),
    "max_retries": ("--llm-retries", "FERRY_LLM_RETRIES"),
    "backoff_s": ("--llm-backoff", "FERRY_LLM_BACKOFF_S"),
    "max_wall_s": ("--llm-max-wall", "FERRY_LLM_MAX_WALL_S"),
    "max_calls": ("--llm-max-calls", "FERRY_LLM_MAX_CALLS"),
    "max_tokens": ("--llm-max-tokens", "FERRY_LLM_MAX_TOKENS"),
    "max_reply_chars": ("--llm-max-reply-chars", "FERRY_LLM_MAX_REPLY_CHARS"),
}


def check_limit(field: str, value: object, source: str) -> object:
    """``value`` (a flag's or a variable's) checked against ``field``'s type and bounds."""
    info = LLMLimits.model_fields[field]
    try:
        return LLMLimits.model_validate({field: value}).model_dump()[field]
    except ValidationError as exc:
        problem = "; ".join(e["msg"] for e in exc.errors(include_url=False))
        raise ValueError(f"{source}: {problem}, got {value!r} ({info.description or field})") from None


def resolve_limits(flags: Mapping[str, object | None], environ: Mapping[str, str] | None = None) -> LLMLimits:
    """The limits from ``flags`` (field -> value, None when not given), else the FERRY_LLM_* variables
    (of ``environ``, default the process's), else the defaults. ValueError names the flag or variable
    whose value is wrong (a variable is checked only where no flag overrides it)."""
    texts = settings_of(environ).llm.limit_texts()
    out: dict[str, object] = {}
    for field, (flag, env) in LIMIT_SOURCES.items():
        if flags.get(field) is not None:
            out[field] = check_limit(field, flags[field], flag)
        elif field in texts:
            out[field] = check_limit(field, texts[field], f"${env}")
    return LLMLimits.model_validate(out)


# -- the cost cap in money (agent.llm.cost) --------------------------------------------------------

COST_FLAG = "--llm-max-cost"
COST_ENV = "FERRY_LLM_MAX_COST_USD"
NO_CAP = "none"

MaxCost = float | Literal["none"]


def parse_max_cost(text: object, source: str = COST_FLAG) -> MaxCost:
    """A cap in US dollars (a finite number above 0) or ``none``; ValueError names ``source``."""
    raw = str(text).strip()
    if raw.lower() == NO_CAP:
        return "none"
    try:
        value = float(raw.removeprefix("$"))
    except ValueError:
        value = math.nan
    if not math.isfinite(value) or value <= 0:
        raise ValueError(f"{source}: a cost cap is a number of US dollars above 0 (e.g. 2.50) or 'none' for no "
                         f"cap, got {raw!r}")
    return value


# -- the groups -------------------------------------------------------------------------------------

_ENVIRON: ContextVar[Mapping[str, str] | None] = ContextVar("ferry_settings_environ", default=None)


class _MappingEnvSource(EnvSettingsSource):
    """The environment source over the mapping being read (a blank value is unset; values stripped)."""

    def _load_env_vars(self) -> Mapping[str, str | None]:
        env = _ENVIRON.get()
        env = os.environ if env is None else env
        return {(k if self.case_sensitive else k.lower()): v.strip() for k, v in env.items() if v and v.strip()}

    def __call__(self) -> dict[str, Any]:
        data = super().__call__()
        if self.settings_cls.model_config.get("extra") == "allow":  # the group's other variables, as extras
            prefix = str(self.settings_cls.model_config.get("env_prefix", "")).lower()
            for key, value in self.env_vars.items():
                name = key.lower().removeprefix(prefix)
                if key.lower().startswith(prefix) and name not in self.settings_cls.model_fields and value:
                    data.setdefault(name, value)
        return data


class _Group(BaseSettings):
    model_config = SettingsConfigDict(frozen=True, extra="ignore", case_sensitive=False)

    @classmethod
    def settings_customise_sources(cls, settings_cls: type[BaseSettings], init_settings: PydanticBaseSettingsSource,
                                   env_settings: PydanticBaseSettingsSource,
                                   dotenv_settings: PydanticBaseSettingsSource,
                                   file_secret_settings: PydanticBaseSettingsSource,
                                   ) -> tuple[PydanticBaseSettingsSource, ...]:
        return (init_settings, _MappingEnvSource(settings_cls))

    @classmethod
    def variable(cls, field: str) -> str:
        """The environment variable of ``field``."""
        info: FieldInfo = cls.model_fields[field]
        alias = info.validation_alias
        if isinstance(alias, str):
            return alias
        return f"{cls.model_config.get('env_prefix', '')}{field}".upper()

    @classmethod
    def read(cls, environ: Mapping[str, str]) -> Self:
        token = _ENVIRON.set(environ)
        try:
            return cls()
        except ValidationError as exc:
            first = exc.errors(include_url=False)[0]
            field = str(first["loc"][0]) if first["loc"] else ""
            name = cls.variable(field) if field in cls.model_fields else field.upper()
            message = str(first["msg"]).removeprefix("Value error, ")
            raise SettingsError(f"${name} {message}", name) from None
        finally:
            _ENVIRON.reset(token)


class LLMEnv(_Group):
    """The model server (``ferry migrate --llm``, the service's chat, ``ferry eval --policy llm``)."""

    model_config = SettingsConfigDict(env_prefix="FERRY_LLM_")

    base_url: str | None = Field(default=None, description="an OpenAI-compatible server (None: OpenAI's)")
    model: str | None = Field(default=None, description="the model's name")
    api_key: SecretStr | None = Field(default=None, description="the server's key (else $OPENAI_API_KEY)")
    openai_api_key: SecretStr | None = Field(default=None, validation_alias="OPENAI_API_KEY",
                                             description="the key's usual name, when FERRY_LLM_API_KEY is not set")
    prices: Path | None = Field(default=None, description="a token price table (default agent/llm/prices.toml)")
    # the limits' texts: resolve_limits checks each against LLMLimits where no flag overrides it
    timeout_s: str | None = None
    retries: str | None = None
    backoff_s: str | None = None
    max_wall_s: str | None = None
    max_calls: str | None = None
    max_tokens: str | None = None
    max_reply_chars: str | None = None
    max_cost_usd: str | None = Field(default=None, description=(
        "the cost cap in US dollars, or 'none' (agent.llm.cost.parse_max_cost checks it)"))

    _LIMIT_FIELDS: ClassVar[dict[str, str]] = {
        "request_timeout_s": "timeout_s", "max_retries": "retries", "backoff_s": "backoff_s",
        "max_wall_s": "max_wall_s", "max_calls": "max_calls", "max_tokens": "max_tokens",
        "max_reply_chars": "max_reply_chars"}

    def limit_texts(self) -> dict[str, str]:
        """LLMLimits field -> the text of its variable, for the variables that are set."""
        out = {}
        for field, name in self._LIMIT_FIELDS.items():
            text = getattr(self, name)
            if text is not None:
                out[field] = text
        return out

    def key(self) -> str | None:
        """``$FERRY_LLM_API_KEY``, else ``$OPENAI_API_KEY``."""
        given = self.api_key if self.api_key is not None else self.openai_api_key
        return None if given is None else given.get_secret_value()

    def configured(self) -> bool:
        """Whether a model server is named (base URL, model and a key)."""
        return bool(self.base_url and self.model and self.key())


class ServiceEnv(_Group):
    """``ferry serve``'s defaults (its flags win)."""

    model_config = SettingsConfigDict(env_prefix="FERRY_")

    data_dir: str | None = Field(default=None, description="sessions, workspaces, outputs (--data-dir)")
    allow_roots: str | None = Field(default=None, description="server directories clients may name, "
                                                              "':'-separated (--allow-root)")
    workers: PositiveInt | None = Field(default=None, description="sessions migrated at once (--workers; "
                                                                  "None: the number of cores)")
    queue: PositiveInt = Field(default=64, description="sessions waiting for a worker before 429 (--queue)")
    max_upload_mb: PositiveInt = Field(default=50, description="largest archive accepted (--max-upload-mb)")
    max_files: PositiveInt = Field(default=5000, description="most files in an upload (--max-files)")
    max_unpacked_mb: PositiveInt = Field(default=500, description="most bytes an upload unpacks to")
    header_timeout: Seconds = Field(default=DEFAULT_HEADER_S, description="--header-timeout")
    body_timeout: Seconds = Field(default=DEFAULT_BODY_IDLE_S, description="--body-timeout")
    body_total_timeout: Seconds = Field(default=DEFAULT_BODY_TOTAL_S, description="--body-total-timeout")
    api_tokens: str = Field(default="", description="owner=token,... (agent.service.settings.parse_tokens)")
    api_token: str | None = Field(default=None, description="the older single-token variable")
    allowed_hosts: str | None = Field(default=None, description="Host names, comma-separated (--allowed-host)")
    service_database: str | None = Field(default=None, description="a postgresql:// URL: the service's sessions, "
                                                                   "GitHub jobs and checkpoints there (--database)")
    lease: Seconds = Field(default=DEFAULT_LEASE_S, description="a claimed session's lease on Postgres (--lease)")

    def allow_root_list(self) -> list[str]:
        return [r for r in (self.allow_roots or "").split(os.pathsep) if r.strip()]

    def allowed_host_list(self) -> list[str]:
        return [h for h in (self.allowed_hosts or "").split(",") if h.strip()]


class GitHubEnv(_Group):
    """The PR bot's GitHub side; agent.prbot.github.config.GitHubConfig checks them together."""

    model_config = SettingsConfigDict(env_prefix="FERRY_GITHUB_", extra="allow")

    api_url: str | None = None
    token: str | None = None
    app_id: str | None = None
    private_key: str | None = None
    private_key_file: str | None = None
    installation_id: str | None = None
    webhook_secret: str | None = None
    label: str | None = None
    clone_url: str | None = None
    bot_login: str | None = None
    run: str | None = None
    test: str | None = None
    author: str | None = None
    workers: str | None = None
    max_event_age: str | None = None

    def values(self) -> dict[str, str]:
        """Variable name without FERRY_GITHUB_ -> its value, for every variable set (unknown ones too)."""
        given = {name.upper(): value for name, value in self.model_dump().items() if value is not None}
        given.update({name.upper(): str(value) for name, value in (self.model_extra or {}).items()})
        return given


class PathsEnv(_Group):
    """Where Ferry keeps its state."""

    model_config = SettingsConfigDict(env_prefix="FERRY_")

    state_dir: str | None = Field(default=None, description="checkpoints and workspaces (default ~/.ferry)")
    kb_path: str | None = Field(default=None, description="the knowledge base (default <state dir>/knowledge)")
    database_url: str | None = Field(default=None, description="a postgresql:// URL: checkpoints in Postgres")


class GitEnv(_Group):
    """``ferry pr``'s commits."""

    model_config = SettingsConfigDict(env_prefix="FERRY_GIT_")

    author: str | None = Field(default=None, description="'NAME <EMAIL>' (--author)")
    committer: str | None = Field(default=None, description="'NAME <EMAIL>' (--committer)")


class EvalsEnv(_Group):
    """The eval harness."""

    model_config = SettingsConfigDict(env_prefix="FERRY_EVAL_")

    venv_cache: str | None = Field(default=None, description="where the real suite's case venvs live")


class FerrySettings:
    """Ferry's host-side settings from one environment, a group per part, each read when first used."""

    def __init__(self, environ: Mapping[str, str]) -> None:
        self._environ = dict(environ)

    @functools.cached_property
    def llm(self) -> LLMEnv:
        return LLMEnv.read(self._environ)

    @functools.cached_property
    def service(self) -> ServiceEnv:
        return ServiceEnv.read(self._environ)

    @functools.cached_property
    def github(self) -> GitHubEnv:
        return GitHubEnv.read(self._environ)

    @functools.cached_property
    def paths(self) -> PathsEnv:
        return PathsEnv.read(self._environ)

    @functools.cached_property
    def git(self) -> GitEnv:
        return GitEnv.read(self._environ)

    @functools.cached_property
    def evals(self) -> EvalsEnv:
        return EvalsEnv.read(self._environ)


def _relevant(environ: Mapping[str, str]) -> tuple[tuple[str, str], ...]:
    return tuple(sorted((k, v) for k, v in environ.items() if k.startswith(PREFIXES) or k in OTHER_NAMES))


@functools.lru_cache(maxsize=16)
def _cached(items: tuple[tuple[str, str], ...]) -> FerrySettings:
    return FerrySettings(dict(items))


def settings() -> FerrySettings:
    """The settings of this process's environment (cached while the variables keep their values)."""
    return _cached(_relevant(os.environ))


def settings_of(environ: Mapping[str, str] | None) -> FerrySettings:
    """The settings of ``environ`` (None: this process's, as :func:`settings`)."""
    return settings() if environ is None else _cached(_relevant(environ))
