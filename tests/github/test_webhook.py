"""The PR bot end to end: a real `ferry serve`, a fake GitHub API on loopback, and real bare git
repositories as the remotes. The webhook's HMAC, redeliveries, who may start a migration, two
commands on one repository, a re-run that moves the same branch and updates the same pull request,
the label on a pull request, and a failing migration that says why on its thread."""

from __future__ import annotations

import hashlib
import hmac
import json
import subprocess
import sys
import threading
import time
import uuid
from datetime import UTC, datetime
from pathlib import Path

import httpx
import pytest
from fake_github import FakeGitHub
from service_client import PLAIN as PROG  # a program the codemods alone migrate
from service_client import Server

SECRET = "webhook-secret-for-tests-0123456789"
BROKEN = 'import torch\n\nx = torch.ones(2).cuda()\nraise SystemExit("broken on purpose")\n'


def _git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(repo), *args], capture_output=True, text=True, check=True).stdout.strip()


def _remote(tmp: Path, full_name: str, branches: dict[str, dict[str, str]]) -> Path:
    """A bare repository at remotes/<owner>/<repo>.git with the given branches (each from main)."""
    bare = tmp / "remotes" / f"{full_name}.git"
    subprocess.run(["git", "init", "-q", "--bare", "-b", "main", str(bare)], check=True)
    work = tmp / f"seed-{full_name.replace('/', '-')}"
    _git(tmp, "init", "-q", "-b", "main", str(work))
    for branch, files in branches.items():
        if branch != "main":
            _git(work, "checkout", "-q", "-b", branch, "main")
        for rel, text in files.items():
            (work / rel).write_text(text)
        _git(work, "add", ".")
        _git(work, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "-m", f"seed {branch}")
        _git(work, "push", "-q", str(bare), branch)
    return bare


def _sign(body: bytes, secret: str = SECRET) -> str:
    return "sha256=" + hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()


def _deliver(server: Server, event: str, payload: dict, delivery: str | None = None,
             signature: str | None = "right") -> httpx.Response:
    body = json.dumps(payload).encode()
    headers = {"X-GitHub-Event": event, "X-GitHub-Delivery": delivery or str(uuid.uuid4()),
               "Content-Type": "application/json"}
    if signature == "right":
        headers["X-Hub-Signature-256"] = _sign(body)
    elif signature is not None:
        headers["X-Hub-Signature-256"] = signature
    return httpx.post(f"{server.url}/v1/github/webhook", content=body, headers=headers, timeout=30)


def _now() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds").replace("+00:00", "Z")  # as GitHub writes it


def _comment(full_name: str, number: int, user: str, body: str, pull: bool = False) -> dict:
    return {"action": "created", "issue": {"number": number, "title": "t", "pull_request": {"url": "x"} if pull
                                           else None},
            "comment": {"id": 1, "body": body, "user": {"login": user}, "created_at": _now(), "updated_at": _now()},
            "repository": {"full_name": full_name, "default_branch": "main"}, "sender": {"login": user}}


def _wait(predicate, what: str, timeout: float = 240) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.2)


def _server(tmp_path: Path, fake: FakeGitHub, serve) -> Server:
    return serve(env={"FERRY_GITHUB_API_URL": fake.url, "FERRY_GITHUB_TOKEN": fake.token,
                      "FERRY_GITHUB_WEBHOOK_SECRET": SECRET, "FERRY_GITHUB_BOT_LOGIN": "ferry-bot",
                      "FERRY_GITHUB_CLONE_URL": f"{tmp_path}/remotes/{{owner}}/{{repo}}.git",
                      "FERRY_GITHUB_RUN": "python prog.py", "FERRY_GITHUB_AUTHOR": "Ferry Bot <bot@example.com>"})


@pytest.fixture
def serve(tmp_path):
    started: list[Server] = []

    def start(env: dict[str, str] | None = None) -> Server:
        server = Server(tmp_path / f"data-{len(started)}", env=env)
        started.append(server)
        return server

    yield start
    for server in started:
        server.kill()


def test_the_signature_is_checked_before_anything_and_an_unconfigured_server_says_so(tmp_path, fake_github, serve):
    fake_github.add_repo("acme/app")
    server = _server(tmp_path, fake_github, serve)
    payload = _comment("acme/app", 1, "ann", "/ferry migrate")
    missing = _deliver(server, "issue_comment", payload, signature=None)
    assert missing.status_code == 401 and "X-Hub-Signature-256 is missing" in missing.json()["detail"]
    body = json.dumps(payload).encode()
    wrong = _deliver(server, "issue_comment", payload, signature=_sign(body, "another-secret-entirely"))
    assert wrong.status_code == 401 and "does not match" in wrong.json()["detail"]
    assert _deliver(server, "issue_comment", payload, signature="sha1=abc").status_code == 401
    assert fake_github.requests == []  # nothing was asked of GitHub, no job exists
    ping = _deliver(server, "ping", {"zen": "x"})
    assert ping.status_code == 202 and ping.json()["reason"] == "pong"
    other = _deliver(server, "issue_comment", _comment("acme/app", 1, "ann", "looks good to me"))
    assert other.status_code == 202 and other.json() == {"accepted": False, "delivery": other.json()["delivery"],
                                                         "duplicate": False, "reason": "not a /ferry migrate comment"}
    own = _deliver(server, "issue_comment", _comment("acme/app", 1, "ferry-bot", "/ferry migrate"))
    assert own.json()["accepted"] is False and own.json()["reason"] == "the bot's own comment"
    bad = httpx.post(f"{server.url}/v1/github/webhook", content=b"{not json", timeout=30,
                     headers={"X-GitHub-Event": "issue_comment", "X-GitHub-Delivery": "d",
                              "X-Hub-Signature-256": _sign(b"{not json")})
    assert bad.status_code == 400 and "not JSON" in bad.json()["detail"]
    time.sleep(1)
    assert fake_github.requests == []
    # configured for GitHub, the server is reachable from outside: it will not start without API tokens
    env = {**server.env, "FERRY_API_TOKENS": ""}
    refused = subprocess.run([sys.executable, "-m", "agent.cli", "serve", "--port", "0", "--data-dir",
                              str(tmp_path / "no-tokens")], env=env, capture_output=True, text=True, timeout=120)
    assert refused.returncode == 2 and "set FERRY_API_TOKENS" in refused.stderr, refused.stderr[-2000:]
    plain = serve()
    off = _deliver(plain, "issue_comment", payload)
    assert off.status_code == 503 and "FERRY_GITHUB_WEBHOOK_SECRET" in off.json()["detail"]
    assert plain.client.get("/v1/github/jobs").status_code == 503


@pytest.mark.slow
def test_a_comment_opens_a_pull_request_and_redeliveries_reruns_and_races_are_handled(tmp_path, fake_github, serve):
    bare = _remote(tmp_path, "acme/app", {"main": {"prog.py": PROG}})
    fake_github.add_repo("acme/app", bare=bare)
    fake_github.set_permission("acme/app", "ann", "write")
    fake_github.set_permission("acme/app", "eve", "read")
    server = _server(tmp_path, fake_github, serve)

    first = _comment("acme/app", 5, "ann", '/ferry migrate --run "python prog.py"\nplease')
    res = _deliver(server, "issue_comment", first, delivery="d-1")
    assert res.status_code == 202 and res.json()["accepted"] is True
    again = _deliver(server, "issue_comment", first, delivery="d-1")  # GitHub redelivers it
    assert again.status_code == 202 and again.json()["duplicate"] is True and again.json()["accepted"] is False
    _wait(lambda: any("pull request opened" in c for c in fake_github.comments("acme/app", 5)), "the PR")
    said = fake_github.comments("acme/app", 5)
    assert len(said) == 2 and said[0].startswith("Ferry started migrating `main` of acme/app into `ferry/migrate-tpx`")
    assert "**migrated**" in said[1] and "https://github.example/acme/app/pull/1" in said[1]
    pulls = fake_github.pulls("acme/app")
    assert len(pulls) == 1 and pulls[0]["head"] == "ferry/migrate-tpx" and pulls[0]["base"] == "main"
    assert "## Changes by rule" in pulls[0]["body"] and "## Parity" in pulls[0]["body"]
    assert "ferry pr . --base main --branch ferry/migrate-tpx --run 'python prog.py'" in pulls[0]["body"]
    head = _git(bare, "rev-parse", "refs/heads/ferry/migrate-tpx")
    assert _git(bare, "log", "-1", "--format=%an <%ae>", head) == "Ferry Bot <bot@example.com>"
    assert fake_github.errors == []  # among them: a PR whose branch was not pushed yet would be a 422
    assert all(r.headers["Authorization"] == f"Bearer {fake_github.token}" for r in fake_github.requests)
    paths = [(r.method, r.path) for r in fake_github.requests]
    assert paths.index(("POST", "/repos/acme/app/pulls")) > paths.index(("GET", "/repos/acme/app/pulls"))
    assert paths[0] == ("GET", "/repos/acme/app/collaborators/ann/permission")

    # no write access: told so, nothing cloned or pushed
    _deliver(server, "issue_comment", _comment("acme/app", 7, "eve", "/ferry migrate"))
    _wait(lambda: fake_github.comments("acme/app", 7), "the refusal")
    assert "needs write access" in fake_github.comments("acme/app", 7)[0] and "@\u200beve has read access" in \
        fake_github.comments("acme/app", 7)[0]  # (a zero-width space: quoted, never a mention)

    # a new commit on main, then two commands at once: they run one after the other, the first moves
    # the same branch onto the new main and updates the same pull request, the second finds it done
    seed = tmp_path / "seed-acme-app"
    (seed / "NOTES.md").write_text("notes\n")
    _git(seed, "add", ".")
    _git(seed, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "-m", "more")
    _git(seed, "push", "-q", str(bare), "main")
    opened = fake_github.repos["acme/app"].pulls[1]
    assert opened["body"].startswith("<!-- ferry:begin") and opened["body"].endswith("<!-- ferry:end -->\n")
    opened["body"] = "Ann: wait for the release.\n" + opened["body"]  # a person's words above Ferry's part
    answers: list[httpx.Response] = []
    threads = [threading.Thread(target=lambda n=n: answers.append(
        _deliver(server, "issue_comment", _comment("acme/app", n, "ann", "/ferry migrate")))) for n in (8, 9)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(a.status_code for a in answers) == [202, 202] and all(a.json()["accepted"] for a in answers)
    done = lambda n: any("pull request updated" in c for c in fake_github.comments("acme/app", n))  # noqa: E731
    _wait(lambda: done(8) and done(9), "both re-runs")
    queued = [c for n in (8, 9) for c in fake_github.comments("acme/app", n) if c.startswith("Ferry: queued behind")]
    assert len(queued) == 1
    assert len(fake_github.pulls("acme/app")) == 1 and len(fake_github.of("PATCH", "/repos/acme/app/pulls/1")) == 2
    moved = _git(bare, "rev-parse", "refs/heads/ferry/migrate-tpx")
    assert moved != head and _git(bare, "merge-base", moved, "main") == _git(bare, "rev-parse", "main")
    results = [c for n in (8, 9) for c in fake_github.comments("acme/app", n) if "pull request updated" in c]
    assert sorted("unchanged" in c for c in results) == [False, True]  # one moved it, the other found it there
    starts = [r.at for r in fake_github.requests if r.method == "POST" and r.path.endswith("/comments")
              and r.body["body"].startswith("Ferry started")]
    ends = [r.at for r in fake_github.requests if r.method == "POST" and r.path.endswith("/comments")
            and "pull request updated" in r.body["body"]]
    assert starts[-1] > ends[0]  # the second started only after the first had finished
    updated = fake_github.repos["acme/app"].pulls[1]["body"]  # Ferry's part rewritten, the person's words kept
    assert updated.startswith("Ann: wait for the release.\n<!-- ferry:begin") and updated.count("ferry:begin") == 1
    assert fake_github.errors == []

    # the jobs as the service shows them to a holder of its token: newest first, each with its ending
    assert httpx.get(f"{server.url}/v1/github/jobs", timeout=30).status_code == 401
    listed = server.client.get("/v1/github/jobs", params={"repo": "acme/app"}).json()
    assert listed["total"] == 4 and [j["number"] for j in listed["items"]][-2:] == [7, 5]
    assert all(j["state"] in {"done", "failed"} and j["attempt"] == 1 for j in listed["items"])
    job = server.client.get("/v1/github/jobs/d-1").json()
    assert job["state"] == "done" and job["sender"] == "ann" and job["run_command"] == "python prog.py"
    assert "pull request opened" in job["outcome"] and job["finished"] >= job["started"] >= job["created"]
    refused = server.client.get("/v1/github/jobs", params={"state": "failed"}).json()["items"]
    assert [j["number"] for j in refused] == [7] and "needs write access" in refused[0]["outcome"]
    assert server.client.get("/v1/github/jobs/nope").status_code == 404


@pytest.mark.slow
def test_the_label_on_a_pull_request_migrates_its_branch_and_a_failure_says_why(tmp_path, fake_github, serve):
    bare = _remote(tmp_path, "acme/broken", {"main": {"README.md": "x\n"}, "feature": {"prog.py": BROKEN}})
    repo = fake_github.add_repo("acme/broken", bare=bare)
    repo.pulls[3] = {"state": "open", "title": "feature", "body": "", "head": "feature", "base": "main"}
    repo.next_number = 4
    fake_github.set_permission("acme/broken", "ann", "admin")
    server = _server(tmp_path, fake_github, serve)
    pr = {"number": 3, "html_url": "u", "state": "open", "title": "feature", "body": None,
          "head": {"ref": "feature", "sha": "0" * 40, "repo": {"full_name": "acme/broken"}},
          "base": {"ref": "main", "sha": "0" * 40}, "updated_at": _now()}
    event = {"action": "labeled", "number": 3, "pull_request": pr, "label": {"name": "ferry-migrate"},
             "repository": {"full_name": "acme/broken", "default_branch": "main"}, "sender": {"login": "ann"}}
    other = _deliver(server, "pull_request", {**event, "label": {"name": "bug"}})
    assert other.json()["accepted"] is False and "not labelled 'ferry-migrate'" in other.json()["reason"]
    assert _deliver(server, "pull_request", event).json()["accepted"] is True
    _wait(lambda: len(fake_github.comments("acme/broken", 3)) >= 2, "the failure comment")
    started, failed = fake_github.comments("acme/broken", 3)
    assert started.startswith("Ferry started migrating `feature` of acme/broken into "
                              "`ferry/migrate-tpx-for-feature`")
    assert "ended **needs_human**" in failed and "No pull request was opened" in failed
    # nothing pushed: the verdict is a check run on the pull request's own head
    (run,) = fake_github.repos["acme/broken"].check_runs.values()
    assert run["conclusion"] == "neutral" and run["head_sha"] == _git(bare, "rev-parse", "refs/heads/feature")
    assert run["output"]["title"].startswith("needs_human: ") and "check run `Ferry migration`" in failed
    assert len(fake_github.pulls("acme/broken")) == 1  # only the user's own
    assert subprocess.run(["git", "--git-dir", str(bare), "rev-parse", "--verify", "--quiet",
                           "refs/heads/ferry/migrate-tpx-for-feature"], capture_output=True).returncode != 0
    assert fake_github.errors == []


@pytest.mark.slow
def test_a_push_the_remote_refuses_is_commented_without_the_servers_paths_and_opens_no_pr(tmp_path, fake_github,
                                                                                          serve):
    bare = _remote(tmp_path, "acme/locked", {"main": {"prog.py": PROG}})
    gate = bare / "hooks" / "pre-receive"
    gate.write_text("#!/bin/sh\necho 'protected: pushes need a review' >&2\nexit 1\n")
    gate.chmod(0o755)
    fake_github.add_repo("acme/locked", bare=bare)
    fake_github.set_permission("acme/locked", "ann", "maintain")
    server = _server(tmp_path, fake_github, serve)
    assert _deliver(server, "issue_comment", _comment("acme/locked", 2, "ann", "/ferry migrate"),
                    delivery="locked-1").json()["accepted"]
    _wait(lambda: len(fake_github.comments("acme/locked", 2)) >= 2, "the failure comment")
    failed = fake_github.comments("acme/locked", 2)[1]
    assert failed.startswith("Ferry could not migrate acme/locked: the migration passed but pushing "
                             "`ferry/migrate-tpx` failed (git push --porcelain")
    assert "protected: pushes need a review" in failed and "comment `/ferry migrate` again" in failed
    assert "\\[remote rejected\\]" in failed and "pre-receive hook declined" in failed  # git's reason (--porcelain)
    # the thread is told neither the job's clone (in the data dir) nor the remote's URL (here a path)
    assert str(server.data_dir) not in failed and str(tmp_path) not in failed and "to 'origin'" in failed
    assert fake_github.pulls("acme/locked") == [] and fake_github.of("POST", "/repos/acme/locked/pulls") == []
    job = server.client.get("/v1/github/jobs/locked-1").json()
    assert job["state"] == "failed" and "holds the migration" in job["outcome"]
    assert fake_github.errors == []


@pytest.mark.slow
def test_jobs_are_cancelled_queued_at_once_and_running_before_anything_is_pushed(tmp_path, fake_github, serve):
    # the original sleeps a minute, the migrated code (its .cuda() rewritten) does not: the reference run is a
    # background run the job waits for once its first target run is done, and that is when it is cancelled
    slow_original = 'import time\nif "float32)" + ".cuda()" in open(__file__).read():\n    time.sleep(60)\n'
    bare = _remote(tmp_path, "acme/slow", {"main": {"prog.py": slow_original + PROG}})
    fake_github.add_repo("acme/slow", bare=bare)
    fake_github.set_permission("acme/slow", "ann", "write")
    server = _server(tmp_path, fake_github, serve)
    c = server.client
    ask = _deliver(server, "issue_comment", _comment("acme/slow", 1, "ann", "/ferry migrate"), delivery="s-1")
    assert ask.json()["accepted"]
    _wait(lambda: fake_github.comments("acme/slow", 1), "the started comment")
    ask = _deliver(server, "issue_comment", _comment("acme/slow", 2, "ann", "/ferry migrate"), delivery="s-2")
    assert ask.json()["accepted"]
    _wait(lambda: fake_github.comments("acme/slow", 2), "the queued comment")
    assert httpx.delete(f"{server.url}/v1/github/jobs/s-2", timeout=30).status_code == 401  # the service's token

    queued = c.delete("/v1/github/jobs/s-2")
    assert queued.status_code == 202 and queued.json()["state"] == "cancelled"
    assert fake_github.comments("acme/slow", 2)[-1] == \
        "Ferry: this migration was cancelled on the server before it started."
    # the first run of the migrated code: an evidence run (ended after its recorded steps) where it applies
    first_target = ("*/evidence-*/result.json", "*/target-*/result.json")
    _wait(lambda: [p for g in first_target for p in (server.data_dir / "state" / "artifacts").glob(g)],
          "the first target run's end")
    started = time.monotonic()
    running = c.delete("/v1/github/jobs/s-1")
    assert running.status_code == 202 and running.json()["state"] == "running" and running.json()["cancel_requested"]
    _wait(lambda: c.get("/v1/github/jobs/s-1").json()["state"] == "cancelled", "the running job to stop", timeout=40)
    assert time.monotonic() - started < 40  # the reference run (60 s) was stopped, not waited for
    assert fake_github.comments("acme/slow", 1)[-1].startswith("Ferry: this migration was cancelled on the server "
                                                               "while it ran; nothing was pushed")
    assert _git(bare, "branch", "--format=%(refname:short)") == "main" and fake_github.pulls("acme/slow") == []
    again = c.delete("/v1/github/jobs/s-1")
    assert again.status_code == 409 and "already ended (cancelled)" in again.json()["detail"]
    assert c.delete("/v1/github/jobs/nope").status_code == 404
    assert c.get("/v1/github/jobs", params={"state": "cancelled"}).json()["total"] == 2
    time.sleep(1.5)  # the worker is free again and claims nothing: the cancelled job never runs
    assert len(fake_github.comments("acme/slow", 2)) == 2
    assert fake_github.errors == []
