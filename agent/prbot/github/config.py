"""The GitHub configuration of the service's PR bot, from the environment (``ferry serve`` reads it)."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from pydantic import BaseModel, ConfigDict, SecretStr

from agent.settings import settings_of

PREFIX = "FERRY_GITHUB_"


class GitHubConfigError(ValueError):
    """A FERRY_GITHUB_* value is wrong: the message names the variable and what to give (never a secret)."""


class GitHubConfig(BaseModel):
    model_config = ConfigDict(frozen=True)

    api_url: str = "https://api.github.com"
    token: SecretStr | None = None
    app_id: int | None = None
    private_key: SecretStr | None = None
    installation_id: int | None = None
    webhook_secret: SecretStr
    label: str = "ferry-migrate"
    clone_url: str = "https://github.com/{owner}/{repo}.git"
    bot_login: str | None = None
    run_command: str | None = None
    test_command: str | None = None
    author: str | None = None
    user_agent: str = "ferry-pr-bot"
    timeout_s: float = 30.0
    workers: int = 1
    max_event_age_s: int = 3600  # an event whose own timestamp is older is ignored (a replay, or stale)

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None, *, webhook: bool = True) -> GitHubConfig | None:
        """The configuration, or None when no FERRY_GITHUB_* variable is set (the webhook then answers 503).
        ``webhook=False`` (``ferry bot sweep``, which takes no deliveries): no webhook secret is needed, and
        where none is set a random one stands in for it."""
        values = settings_of(environ).github.values()
        if not values:
            return None
        secret = values.get("WEBHOOK_SECRET")
        if not secret and not webhook:
            import secrets

            secret = secrets.token_urlsafe(32)
        if not secret:
            raise GitHubConfigError(f"{PREFIX}WEBHOOK_SECRET is not set: the webhook must verify what GitHub sends; "
                                    "give the secret you set on GitHub's webhook page (a long random string)")
        if len(secret) < 16:
            raise GitHubConfigError(f"{PREFIX}WEBHOOK_SECRET is shorter than 16 characters; use a long random one")
        key = values.get("PRIVATE_KEY")
        if not key and values.get("PRIVATE_KEY_FILE"):
            try:
                key = Path(values["PRIVATE_KEY_FILE"]).expanduser().read_text(encoding="utf-8")
            except OSError as exc:
                raise GitHubConfigError(f"{PREFIX}PRIVATE_KEY_FILE cannot be read: {exc.strerror}") from None
        app_id = _int(values, "APP_ID")
        if (app_id is None) != (key is None):
            raise GitHubConfigError(f"a GitHub App needs both {PREFIX}APP_ID and {PREFIX}PRIVATE_KEY "
                                    f"(or {PREFIX}PRIVATE_KEY_FILE); one of them is missing")
        if key is not None and "PRIVATE KEY" not in key:
            raise GitHubConfigError(f"{PREFIX}PRIVATE_KEY is not a PEM private key (-----BEGIN ... PRIVATE KEY-----)")
        if not values.get("TOKEN") and app_id is None:
            raise GitHubConfigError(f"no GitHub credentials: set {PREFIX}TOKEN (a token with contents, pull requests "
                                    f"and issues write) or {PREFIX}APP_ID with {PREFIX}PRIVATE_KEY")
        api = values.get("API_URL", cls.model_fields["api_url"].default).rstrip("/")
        if not api.startswith(("https://", "http://127.0.0.1", "http://localhost", "http://[::1]")):
            raise GitHubConfigError(f"{PREFIX}API_URL must be an https:// URL (http only on loopback), got {api!r}")
        clone = values.get("CLONE_URL", cls.model_fields["clone_url"].default)
        if "{owner}" not in clone or "{repo}" not in clone:
            raise GitHubConfigError(f"{PREFIX}CLONE_URL must hold {{owner}} and {{repo}}, got {clone!r}")
        workers = _int(values, "WORKERS")
        max_age = _int(values, "MAX_EVENT_AGE")
        if max_age is not None and max_age < 60:
            raise GitHubConfigError(f"{PREFIX}MAX_EVENT_AGE is the oldest event Ferry acts on, in seconds: give at "
                                    f"least 60 (default 3600), got {values['MAX_EVENT_AGE']!r}")
        token = values.get("TOKEN")
        return cls(api_url=api, token=SecretStr(token) if token else None, app_id=app_id,
                   private_key=SecretStr(key) if key else None,
                   installation_id=_int(values, "INSTALLATION_ID"), webhook_secret=SecretStr(secret),
                   label=values.get("LABEL", "ferry-migrate"), clone_url=clone, bot_login=values.get("BOT_LOGIN"),
                   run_command=values.get("RUN"), test_command=values.get("TEST"), author=values.get("AUTHOR"),
                   workers=max(1, workers or 1),
                   max_event_age_s=max_age if max_age is not None else cls.model_fields["max_event_age_s"].default)


def _int(values: Mapping[str, str], name: str) -> int | None:
    if name not in values:
        return None
    try:
        return int(values[name])
    except ValueError:
        raise GitHubConfigError(f"{PREFIX}{name} must be a number, got {values[name]!r}") from None
