"""The PR bot's ``/ferry migrate`` takes no ``--env`` from a comment: a loader variable there is refused
with a comment that says so and what to do (issue 34, item 1), and no job is started for it."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from pydantic import SecretStr

from agent.prbot.github.config import GitHubConfig
from agent.prbot.github.webhook import CommandError, Trigger, parse_command, trigger_of

CONFIG = GitHubConfig(token=SecretStr("t"), webhook_secret=SecretStr("x" * 20), bot_login="ferry-bot",
                      run_command="python default.py")


@pytest.mark.parametrize("text", ["/ferry migrate --env LD_PRELOAD=/tmp/hook.so",
                                  "/ferry migrate --run 'python t.py' --env=PYTHONSTARTUP=/x.py",
                                  "/ferry migrate --env DATA_DIR=data"])
def test_env_in_a_comment_is_refused_with_what_to_do(text: str) -> None:
    with pytest.raises(CommandError, match="`--env` is refused") as err:
        parse_command(text)
    assert "in the run command itself" in str(err.value)
    now = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    payload = {"action": "created", "issue": {"number": 4, "pull_request": None},
               "comment": {"id": 1, "body": text, "user": {"login": "ann"}, "created_at": now, "updated_at": now},
               "repository": {"full_name": "acme/app"}, "sender": {"login": "ann"}, "installation": {"id": 9}}
    t = trigger_of("issue_comment", "d1", payload, CONFIG)
    assert isinstance(t, Trigger) and t.error is not None and "`--env` is refused" in t.error
