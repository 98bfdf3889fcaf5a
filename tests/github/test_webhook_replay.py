"""Replays and stale events: one job per signed event whatever X-GitHub-Delivery says, no job for an
event older than the window, a plain-name delivery id, and an older github.db upgraded in place."""

from __future__ import annotations

import json
import sqlite3
import time
from datetime import UTC, datetime, timedelta

import httpx
import pytest
from pydantic import SecretStr
from test_webhook import _deliver, _server, _sign, _wait, serve  # noqa: F401  (serve: a fixture)

from agent.prbot.github.config import GitHubConfig, GitHubConfigError
from agent.prbot.github.webhook import Ignored, Trigger, trigger_of
from agent.prbot.store import GitHubStore

CONFIG = GitHubConfig(token=SecretStr("t"), webhook_secret=SecretStr("x" * 20), run_command="python p.py")


def payload_key(event: str, body: bytes) -> str:  # imported here: the end-to-end tests also run on older code
    from agent.prbot.github.webhook import payload_key as key

    return key(event, body)


def _stamp(ago_s: float) -> str:
    return (datetime.now(UTC) - timedelta(seconds=ago_s)).isoformat(timespec="seconds").replace("+00:00", "Z")


def _comment(comment_id: int, ago_s: float | None = 0, user: str = "eve", number: int = 3) -> dict:
    comment = {"id": comment_id, "body": "/ferry migrate", "user": {"login": user}}
    if ago_s is not None:
        comment |= {"created_at": _stamp(ago_s), "updated_at": _stamp(ago_s)}
    return {"action": "created", "issue": {"number": number, "title": "t", "pull_request": None}, "comment": comment,
            "repository": {"full_name": "acme/app", "default_branch": "main"}, "sender": {"login": user}}


def test_an_event_older_than_the_window_or_without_its_time_is_ignored():
    assert isinstance(trigger_of("issue_comment", "d", _comment(1, ago_s=5), CONFIG), Trigger)
    old = trigger_of("issue_comment", "d", _comment(1, ago_s=3 * 3600), CONFIG)
    assert isinstance(old, Ignored) and old.reason.startswith("ignored: stale: its comment.created_at is 108")
    assert "FERRY_GITHUB_MAX_EVENT_AGE" in old.reason
    ahead = trigger_of("issue_comment", "d", _comment(1, ago_s=-3600), CONFIG)
    assert isinstance(ahead, Ignored) and "ahead of this server's clock" in ahead.reason
    bare = _comment(1)
    del bare["comment"]["created_at"], bare["comment"]["updated_at"]
    none = trigger_of("issue_comment", "d", bare, CONFIG)
    assert isinstance(none, Ignored) and "carries no comment.created_at" in none.reason
    wide = CONFIG.model_copy(update={"max_event_age_s": 4 * 3600})
    assert isinstance(trigger_of("issue_comment", "d", _comment(1, ago_s=3 * 3600), wide), Trigger)
    pr = {"number": 2, "html_url": "u", "state": "open", "title": "t", "head": {"ref": "f", "sha": "0"},
          "base": {"ref": "main", "sha": "0"}, "updated_at": _stamp(7200)}
    label = {"action": "labeled", "number": 2, "pull_request": pr, "label": {"name": "ferry-migrate"},
             "repository": {"full_name": "acme/app"}, "sender": {"login": "ann"}}
    stale_label = trigger_of("pull_request", "d", label, CONFIG)
    assert isinstance(stale_label, Ignored) and "pull_request.updated_at is 72" in stale_label.reason
    assert GitHubConfig.from_env({"FERRY_GITHUB_WEBHOOK_SECRET": "s" * 20, "FERRY_GITHUB_TOKEN": "t",
                                  "FERRY_GITHUB_MAX_EVENT_AGE": "600"}).max_event_age_s == 600  # type: ignore[union-attr]
    with pytest.raises(GitHubConfigError, match=r"MAX_EVENT_AGE .* at least 60"):
        GitHubConfig.from_env({"FERRY_GITHUB_WEBHOOK_SECRET": "s" * 20, "FERRY_GITHUB_TOKEN": "t",
                               "FERRY_GITHUB_MAX_EVENT_AGE": "5"})


def _trigger(delivery: str, key: str | None, repo: str = "app") -> Trigger:
    return Trigger.model_validate({"delivery": delivery, "event": "issue_comment", "owner": "acme", "repo": repo,
                                   "number": 1, "is_pull": False, "sender": "ann", "run_command": "python p.py",
                                   "payload_key": key})


def test_the_store_keeps_one_job_per_signed_event(tmp_path):
    store = GitHubStore(tmp_path / "github.db")
    key = payload_key("issue_comment", b'{"a": 1}')
    assert key == payload_key("issue_comment", b'{"a": 1}') != payload_key("issue_comment", b'{"a": 2}')
    assert key != payload_key("pull_request", b'{"a": 1}')
    assert store.add(_trigger("d-1", key)) == (True, 0)
    assert store.add(_trigger("d-1", key)) == (False, 0)  # GitHub's redelivery: the same id and body
    assert [store.add(_trigger(f"d-{i}", key)) for i in range(2, 7)] == [(False, 0)] * 5  # replays under new ids
    assert store.add(_trigger("d-7", payload_key("issue_comment", b'{"a": 2}'))) == (True, 1)
    assert store.views()[0] == 2
    store.close()


def test_an_older_github_db_is_upgraded_in_place_and_then_refuses_replays(tmp_path):
    db_path = tmp_path / "github.db"
    with sqlite3.connect(db_path) as db:  # github.db as the server before the replay key wrote it
        db.executescript("CREATE TABLE jobs (delivery TEXT PRIMARY KEY, repo TEXT NOT NULL, state TEXT NOT NULL, "
                         "trigger TEXT NOT NULL, created REAL NOT NULL, started REAL, finished REAL, outcome TEXT, "
                         "attempt INTEGER NOT NULL DEFAULT 0, cancel INTEGER NOT NULL DEFAULT 0);"
                         "CREATE INDEX jobs_repo_state ON jobs (repo, state);")
        for d in ("old-1", "old-2"):
            db.execute("INSERT INTO jobs (delivery, repo, state, trigger, created) VALUES (?, 'acme/app', 'done', ?, "
                       "1.0)", (d, _trigger(d, None).model_dump_json()))
    store = GitHubStore(db_path)
    assert store.views()[0] == 2 and store.get("old-1").state == "done"  # type: ignore[union-attr]
    key = payload_key("issue_comment", b"{}")
    assert store.add(_trigger("new-1", key)) == (True, 0)
    assert store.add(_trigger("new-2", key)) == (False, 0)
    store.close()
    with sqlite3.connect(db_path) as db:
        indexes = {r[1]: r[2] for r in db.execute("PRAGMA index_list(jobs)")}
    assert indexes.get("jobs_payload_key") == 1  # unique
    GitHubStore(db_path).close()  # opening an upgraded one again changes nothing


def _jobs(server) -> list[dict]:
    return server.client.get("/v1/github/jobs", params={"limit": 200}).json()["items"]


def test_a_replayed_signed_body_starts_one_job_and_an_old_comment_none(tmp_path, fake_github, serve):  # noqa: F811
    fake_github.add_repo("acme/app")
    fake_github.set_permission("acme/app", "eve", "read")  # each job ends at once: eve may not migrate
    server = _server(tmp_path, fake_github, serve)
    body = json.dumps(_comment(101)).encode()
    answers = []
    for i in range(6):  # the first delivery, then the same signed body under 5 new delivery ids
        answers.append(httpx.post(f"{server.url}/v1/github/webhook", content=body, timeout=30, headers={
            "X-GitHub-Event": "issue_comment", "X-GitHub-Delivery": f"replay-{i}", "X-Hub-Signature-256": _sign(body),
            "Content-Type": "application/json"}).json())
    assert [a["accepted"] for a in answers] == [True] + [False] * 5
    assert all(a["duplicate"] and a["reason"].startswith("ignored: replay") for a in answers[1:])
    again = httpx.post(f"{server.url}/v1/github/webhook", content=body, timeout=30, headers={  # GitHub's redeliver
        "X-GitHub-Event": "issue_comment", "X-GitHub-Delivery": "replay-0", "X-Hub-Signature-256": _sign(body)})
    assert again.status_code == 202 and again.json()["duplicate"] is True
    _wait(lambda: len(fake_github.comments("acme/app", 3)) >= 1, "the refusal on the thread")
    assert [j["delivery"] for j in _jobs(server)] == ["replay-0"]

    old = _deliver(server, "issue_comment", _comment(102, ago_s=2 * 3600), delivery="old-comment")
    assert old.status_code == 202 and old.json()["accepted"] is False
    assert old.json()["reason"].startswith("ignored: stale: its comment.created_at is")
    new = _deliver(server, "issue_comment", _comment(103, number=4), delivery="new-comment")
    assert new.status_code == 202 and new.json()["accepted"] is True
    _wait(lambda: len(fake_github.comments("acme/app", 4)) >= 1, "the new comment's job")
    time.sleep(1)
    assert sorted(j["delivery"] for j in _jobs(server)) == ["new-comment", "replay-0"]
    assert len(fake_github.comments("acme/app", 3)) == 1  # one job answered the replayed comment, once


def test_a_delivery_id_that_is_not_a_plain_name_is_refused(tmp_path, fake_github, serve):  # noqa: F811
    fake_github.add_repo("acme/app")
    server = _server(tmp_path, fake_github, serve)
    for i, delivery in enumerate(["../../x", "a/b", "/abs", ".hidden", "x" * 200]):
        answer = _deliver(server, "issue_comment", _comment(201 + i), delivery=delivery)
        assert answer.status_code == 400, (delivery, answer.text)
        assert "X-GitHub-Delivery is not a plain name" in answer.json()["detail"]
    assert _jobs(server) == []
    assert server.client.get("/v1/github/jobs/..%2F..%2Fx").status_code == 404
    assert server.client.delete("/v1/github/jobs/a..b").status_code == 404
    assert not list((server.data_dir / "github").glob("**/jobs/*"))
