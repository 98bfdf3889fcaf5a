"""The webhook's pure parts and the jobs' table: the HMAC, the `/ferry migrate` command, what a delivery
asks for, one row per delivery, one running job per repository, and a restart's requeue."""

from __future__ import annotations

import hashlib
import hmac
from datetime import UTC, datetime

import pytest
from pydantic import SecretStr

from agent.prbot.github.config import GitHubConfig
from agent.prbot.github.webhook import (
    CommandError,
    Ignored,
    Trigger,
    ferry_branch,
    parse_command,
    trigger_of,
    verify_signature,
)
from agent.prbot.store import GitHubStore

CONFIG = GitHubConfig(token=SecretStr("t"), webhook_secret=SecretStr("x" * 20), bot_login="ferry-bot",
                      run_command="python default.py")


def test_the_signature_is_the_hmac_of_the_exact_body():
    body = b'{"a": 1}'
    good = "sha256=" + hmac.new(b"key", body, hashlib.sha256).hexdigest()
    assert verify_signature(b"key", body, good)
    assert not verify_signature(b"key", body + b" ", good)
    assert not verify_signature(b"other", body, good)
    assert not verify_signature(b"key", body, None) and not verify_signature(b"key", body, good.replace("256", "1"))


def test_the_command_is_read_from_the_first_line_with_its_quoted_options():
    assert parse_command("/ferry migrate").model_dump() == {"run": None, "test": None}
    cmd = parse_command('\n  /ferry migrate --run "python train.py --steps 8" --test=\'pytest -q\'\nthanks!')
    assert cmd is not None and (cmd.run, cmd.test) == ("python train.py --steps 8", "pytest -q")
    assert parse_command("please /ferry migrate") is None and parse_command("/ferry migrated it") is None
    for text, says in [('/ferry migrate --run "unclosed', "quoting is broken"), ("/ferry migrate --force", "unknown"),
                       ("/ferry migrate --run", "needs a command"), ('/ferry migrate --test ""', "is empty")]:
        with pytest.raises(CommandError, match=says):
            parse_command(text)


def _comment(body: str, user: str = "ann", action: str = "created", repo: str = "acme/app") -> dict:
    now = datetime.now(UTC).isoformat()
    return {"action": action, "issue": {"number": 4, "pull_request": None},
            "comment": {"id": 1, "body": body, "user": {"login": user}, "created_at": now, "updated_at": now},
            "repository": {"full_name": repo}, "sender": {"login": user}, "installation": {"id": 9}}


def test_what_a_delivery_asks_for():
    t = trigger_of("issue_comment", "d1", _comment('/ferry migrate --test "pytest"'), CONFIG)
    assert isinstance(t, Trigger)
    assert (t.owner, t.repo, t.number, t.is_pull, t.run_command, t.test_command, t.installation) == (
        "acme", "app", 4, False, "python default.py", "pytest", 9)
    broken = trigger_of("issue_comment", "d2", _comment("/ferry migrate --nope"), CONFIG)
    assert isinstance(broken, Trigger) and broken.error is not None and "unknown option" in broken.error
    for payload, why in [(_comment("/ferry migrate", action="edited"), "comment edited"),
                         (_comment("/ferry migrate", user="ferry-bot"), "the bot's own comment"),
                         (_comment("/ferry migrate", repo="acme/../etc"), "not an owner/repository name"),
                         ({"action": "created"}, "not one Ferry reads")]:
        answer = trigger_of("issue_comment", "d3", payload, CONFIG)
        assert isinstance(answer, Ignored) and why in answer.reason
    assert "not one Ferry acts on" in trigger_of("push", "d4", {}, CONFIG).reason  # type: ignore[union-attr]
    assert ferry_branch("main", "main") == "ferry/migrate-tpx"
    assert ferry_branch("feat/x y", "main") == "ferry/migrate-tpx-for-feat-x-y"


def _trigger(delivery: str, repo: str = "app") -> Trigger:
    return Trigger(delivery=delivery, event="issue_comment", owner="acme", repo=repo, number=1, is_pull=False,
                   sender="ann", run_command="python p.py")


def test_one_row_per_delivery_and_one_running_job_per_repository(tmp_path):
    store = GitHubStore(tmp_path / "github.db")
    assert store.add(_trigger("a")) == (True, 0)
    assert store.add(_trigger("a")) == (False, 0)  # a redelivery
    assert store.add(_trigger("b")) == (True, 1)  # behind a
    assert store.add(_trigger("c", repo="other")) == (True, 0)
    first = store.claim()
    assert first is not None and first.delivery == "a" and first.attempt == 1
    second = store.claim()
    assert second is not None and second.delivery == "c"  # b waits: its repository is busy
    assert store.claim() is None
    store.finish("a", "done", "ok")
    third = store.claim()
    assert third is not None and third.delivery == "b"
    store.close()
    again = GitHubStore(tmp_path / "github.db")  # a restart: what was running is queued again
    assert sorted(again.requeue_running()) == ["b", "c"]
    row = again.get("a")
    assert row is not None and row.state == "done" and row.outcome == "ok"
    resumed = [again.claim(), again.claim()]
    assert {(r.delivery, r.attempt) for r in resumed if r} == {("b", 2), ("c", 2)}  # the comment says so
    again.close()


def test_a_github_db_from_before_attempts_were_counted_is_upgraded(tmp_path):
    import sqlite3

    with sqlite3.connect(tmp_path / "github.db") as db:
        db.executescript("CREATE TABLE jobs (delivery TEXT PRIMARY KEY, repo TEXT NOT NULL, state TEXT NOT NULL, "
                         "trigger TEXT NOT NULL, created REAL NOT NULL, started REAL, finished REAL, outcome TEXT);")
        db.execute("INSERT INTO jobs (delivery, repo, state, trigger, created) VALUES ('old', 'acme/app', "
                   "'running', ?, 1.0)", (_trigger("old").model_dump_json(),))
    store = GitHubStore(tmp_path / "github.db")
    assert store.requeue_running() == ["old"]
    row = store.claim()
    assert row is not None and row.delivery == "old" and row.attempt == 1
    view = store.view("old")
    assert view is not None and view.state == "running" and not view.cancel_requested
    store.close()


def test_cancels_queued_at_once_running_marked_ended_left_and_honoured_after_a_restart(tmp_path):
    store = GitHubStore(tmp_path / "github.db")
    for d in ("done", "run", "wait"):  # oldest first
        store.add(_trigger(d, repo=d))
    assert store.claim().delivery == "done"  # type: ignore[union-attr]  (each its own repository)
    store.finish("done", "done", "ok")
    assert store.claim().delivery == "run"  # type: ignore[union-attr]
    assert store.request_cancel("wait") == "queued" and store.view("wait").state == "cancelled"  # type: ignore[union-attr]
    assert store.claim() is None  # a cancelled job is never claimed
    assert store.request_cancel("run") == "running" and store.cancel_requested("run")
    assert store.request_cancel("done") == "done" and not store.cancel_requested("done")
    assert store.request_cancel("nope") is None
    store.close()
    again = GitHubStore(tmp_path / "github.db")  # the server died before the running job saw its cancel
    assert again.requeue_running() == []
    assert [r.delivery for r in again.cancelled_at_restart()] == ["run"]
    assert again.view("run").state == "cancelled" and again.claim() is None  # type: ignore[union-attr]
    again.close()


def test_a_pull_request_body_over_githubs_limit_is_cut_at_a_line_saying_so():
    from agent.prbot.jobs import pr_text

    short = "# t\n\nbody\n"
    assert pr_text(short) == short
    long = "".join(f"| row {i} | 1 | 0 |\n" for i in range(10000))
    cut = pr_text(long)
    assert len(cut) <= 65000 and cut.startswith("| row 0 |") and "(cut here: GitHub takes 65536" in cut
    assert cut.split("\n\n(cut here")[0].endswith("|")  # whole lines only


def test_what_a_job_comments_renders_git_and_run_text_as_written():
    from agent.prbot.jobs import failed_comment, not_migrated_comment
    from agent.prbot.pr.models import PrResult

    hostile = "fatal: [click](https://evil.example) <img src=x onerror=alert(1)> **bold** `x` \n# heading"
    said = failed_comment("acme/app", f"cloning acme/app failed: {hostile}")
    assert said.startswith("Ferry could not migrate acme/app: cloning acme/app failed: fatal: ")
    assert "\\[click\\](https:\u200b//evil.example)" in said and "\\<img src=x" in said and "\\*\\*bold\\*\\*" in said
    assert "`x`" in said and "\n" not in said  # Ferry's own quoting kept; one line: no heading
    pinged = failed_comment("acme/app", "fatal: @octo-org/security see https://evil.example and www.evil.example")
    assert "@octo" not in pinged and "https://" not in pinged and "www.evil" not in pinged  # no mention, no autolink
    assert pinged.replace("\u200b", "").endswith("@octo-org/security see https://evil.example and www.evil.example")
    result = PrResult(migration_id="m", status="needs_human", summary="the original fails: <script>`a|b`",
                      base="feat`x", base_sha="0" * 40, title="t", body="", out_dir="/o", pr_text="/o/pr.md")
    text = not_migrated_comment("feat`x", result)
    assert text.startswith("Ferry's migration of ``feat`x`` ended **needs_human**: the original fails: \\<script\\>")
    assert "`a|b`" in text and text.endswith("No pull request was opened.")
