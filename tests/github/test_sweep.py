"""``ferry bot sweep ORG`` against the fake GitHub API on loopback, with real bare git repositories as the
remotes: one pull request for the repository with CUDA idioms and the table's reason for each other; a
second sweep that opens nothing; the organisation listed page by page; GitHub's rate limit waited on, or
the sweep stopped saying until when; the run's cap on pull requests."""

from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path

import httpx
import pytest
from fake_github import FakeGitHub, app_key_pair
from service_client import PLAIN  # a program the codemods alone migrate
from test_webhook import _git, _remote

from agent.cli import main
from agent.prbot.github.client import GitHubClient, GitHubError, next_link, retry_at
from agent.prbot.github.config import GitHubConfig
from agent.prbot.sweep.models import SweepOptions
from agent.prbot.sweep.run import Sweeper

NO_CUDA = 'import torch\n\nx = torch.ones(3)\nprint(f"sum {x.sum().item():.3f}")\n'


@pytest.fixture
def bot_env(tmp_path, fake_github, monkeypatch) -> Path:
    """The bot's environment (as ``ferry serve``'s, without a webhook secret); returns its data dir."""
    for key, value in {"FERRY_GITHUB_API_URL": fake_github.url, "FERRY_GITHUB_TOKEN": fake_github.token,
                       "FERRY_GITHUB_CLONE_URL": f"{tmp_path}/remotes/{{owner}}/{{repo}}.git",
                       "FERRY_GITHUB_RUN": "python prog.py",
                       "FERRY_GITHUB_AUTHOR": "Ferry Bot <bot@example.com>"}.items():
        monkeypatch.setenv(key, value)
    monkeypatch.delenv("FERRY_GITHUB_WEBHOOK_SECRET", raising=False)
    return tmp_path / "data"


def _sweep(capsys, data: Path, *flags: str) -> tuple[int, dict]:
    code = main(["bot", "sweep", "acme", "--data-dir", str(data), "--delay", "0", "--json", *flags])
    out = capsys.readouterr().out
    return code, json.loads(out)


def _org(tmp_path: Path, fake: FakeGitHub) -> Path:
    """acme/app (CUDA idioms), acme/docs (none), acme/legacy (archived: CUDA idioms, never cloned)."""
    app = _remote(tmp_path, "acme/app", {"main": {"prog.py": PLAIN}})
    fake.add_repo("acme/app", bare=app)
    fake.add_repo("acme/docs", bare=_remote(tmp_path, "acme/docs", {"main": {"prog.py": NO_CUDA}}))
    fake.add_repo("acme/legacy", bare=_remote(tmp_path, "acme/legacy", {"main": {"prog.py": PLAIN}}), archived=True)
    return app


@pytest.mark.slow
def test_a_sweep_opens_one_pull_request_says_why_for_the_others_and_a_second_sweep_opens_nothing(
        tmp_path, fake_github, bot_env, capsys):
    app = _org(tmp_path, fake_github)
    code, report = _sweep(capsys, bot_env)
    assert code == 0, report
    by = {r["repo"]: r for r in report["results"]}
    assert report["repositories"] == 3 and report["pull_requests"] == 1 and report["stopped"] is None
    assert by["acme/app"]["outcome"] == "opened" and by["acme/app"]["findings"] >= 3
    assert by["acme/app"]["sha"] == _git(app, "rev-parse", "main")
    assert by["acme/docs"] == {**by["acme/docs"], "outcome": "clean", "findings": 0, "reason": "no CUDA findings"}
    assert by["acme/legacy"]["outcome"] == "skipped" and by["acme/legacy"]["reason"].startswith("archived")
    (pull,) = fake_github.pulls("acme/app")
    assert pull["head"] == "ferry/migrate-tpx" and pull["base"] == "main" and pull["state"] == "open"
    assert by["acme/app"]["pr_url"].endswith("/acme/app/pull/1")
    assert "torch.accelerator" in _git(app, "show", "ferry/migrate-tpx:prog.py")
    (run,) = fake_github.checks("acme/app")
    assert run["head_sha"] == _git(app, "rev-parse", "ferry/migrate-tpx") and run["conclusion"] == "success"
    assert fake_github.pulls("acme/docs") == [] and fake_github.pulls("acme/legacy") == []
    assert not (tmp_path / "data" / "github" / "sweep-legacy").exists()
    assert fake_github.errors == []

    # again: the open pull request and the recorded clean scan at the same commit are not redone
    posts = len([r for r in fake_github.requests if r.method in ("POST", "PATCH")])
    code, again = _sweep(capsys, bot_env)
    assert code == 0 and again["pull_requests"] == 0
    by = {r["repo"]: r for r in again["results"]}
    assert by["acme/app"]["outcome"] == "skipped" and "already swept at" in by["acme/app"]["reason"]
    assert by["acme/docs"]["outcome"] == "skipped" and "already swept at" in by["acme/docs"]["reason"]
    assert "(clean: no CUDA findings)" in by["acme/docs"]["reason"]
    assert len([r for r in fake_github.requests if r.method in ("POST", "PATCH")]) == posts
    assert len(fake_github.pulls("acme/app")) == 1

    # a new commit on acme/app's default branch: Ferry's pull request is still open, so it is left alone
    seed = tmp_path / "seed-acme-app"
    (seed / "README.md").write_text("app\n")
    _git(seed, "add", ".")
    _git(seed, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "-m", "readme")
    _git(seed, "push", "-q", str(app), "main")
    main(["bot", "sweep", "acme", "--data-dir", str(bot_env), "--delay", "0"])
    table = capsys.readouterr().out
    assert "Ferry's pull request #1 is open" in table and "already swept at" in table and "archived" in table
    assert len(fake_github.pulls("acme/app")) == 1


def _sweeper(fake: FakeGitHub, data: Path, waits: list[float] | None = None, **options) -> Sweeper:
    config = GitHubConfig.from_env({"FERRY_GITHUB_API_URL": fake.url, "FERRY_GITHUB_TOKEN": fake.token,
                                    "FERRY_GITHUB_CLONE_URL": f"{data.parent}/remotes/{{owner}}/{{repo}}.git"},
                                   webhook=False)
    assert config is not None
    sleep = (lambda s: waits.append(s)) if waits is not None else time.sleep
    return Sweeper(GitHubClient(config), config, data, SweepOptions(run_command="python prog.py", **options),
                   sleep=sleep)


def test_every_listing_skip_has_its_reason_and_the_listing_follows_githubs_pages(tmp_path, fake_github):
    _org(tmp_path, fake_github)
    fake_github.add_repo("acme/fork", bare=_remote(tmp_path, "acme/fork", {"main": {"prog.py": PLAIN}}), fork=True)
    fake_github.add_repo("acme/readonly", bare=_remote(tmp_path, "acme/readonly", {"main": {"prog.py": PLAIN}}),
                         push=False)
    empty = tmp_path / "remotes" / "acme" / "empty.git"
    subprocess.run(["git", "init", "-q", "--bare", "-b", "main", str(empty)], check=True)
    fake_github.add_repo("acme/empty", bare=empty)
    fake_github.add_repo("other/x", bare=_remote(tmp_path, "other/x", {"main": {"prog.py": PLAIN}}))
    sweeper = _sweeper(fake_github, tmp_path / "data", dry_run=True)
    listed = sweeper.client.org_repos("acme", per_page=2)
    assert [r.full_name for r in listed] == ["acme/app", "acme/docs", "acme/empty", "acme/fork", "acme/legacy",
                                             "acme/readonly"]
    pages = fake_github.of("GET", r"/orgs/acme/repos|/organizations/\d+/repos")
    assert len(pages) == 3 and pages[1].path.startswith("/organizations/")
    report = sweeper.sweep("acme")
    by = {r.repo: r for r in report.results}
    assert by["acme/app"].outcome == "would_open" and by["acme/app"].findings
    assert by["acme/docs"].outcome == "clean"
    assert by["acme/empty"].reason == "empty (no commits)"
    assert by["acme/fork"].reason.startswith("a fork")
    assert by["acme/readonly"].reason == "no push access for Ferry's credentials"
    assert by["acme/legacy"].reason.startswith("archived")
    assert "other/x" not in by and fake_github.pulls("acme/app") == [] and report.pull_requests == 0
    # a dry run records nothing: the next sweep looks at them again
    again = _sweeper(fake_github, tmp_path / "data", dry_run=True).sweep("acme")
    assert {r.repo: r.outcome for r in again.results}["acme/docs"] == "clean"


def test_the_rate_limit_is_waited_on_when_it_resets_soon(tmp_path, fake_github):
    _org(tmp_path, fake_github)
    fake_github.limit_rate(0, 2)  # the window is spent; it resets in 2 s
    sweeper = _sweeper(fake_github, tmp_path / "data", dry_run=True, max_wait_s=60)
    report = sweeper.sweep("acme")
    assert report.stopped is None and report.waited_s > 0
    assert {r.repo: r.outcome for r in report.results} == {"acme/app": "would_open", "acme/docs": "clean",
                                                          "acme/legacy": "skipped"}
    refused = [r for r in fake_github.requests if r.status == 403]
    assert len(refused) == 1 and refused[0].path == "/orgs/acme/repos"


def test_a_rate_limit_longer_than_max_wait_stops_the_sweep_saying_until_when(tmp_path, fake_github):
    _org(tmp_path, fake_github)
    fake_github.fail_next("GET", r"/repos/acme/docs/pulls", 429, "You have exceeded a secondary rate limit.",
                          headers={"Retry-After": "3600"})
    waits: list[float] = []
    report = _sweeper(fake_github, tmp_path / "data", waits, dry_run=True, max_wait_s=60).sweep("acme")
    by = {r.repo: r for r in report.results}
    assert by["acme/app"].outcome == "would_open"
    assert by["acme/docs"].outcome == "not_reached" and waits == []
    assert report.stopped is not None and report.stopped.startswith("stopped at acme/docs: GitHub's rate limit")
    assert "UTC (in 3600 s, longer than the --max-wait of 60 s); run the sweep again after then" in report.stopped
    assert by["acme/legacy"].outcome == "skipped"  # what the listing rules out is still said
    assert not report.ok


def test_the_listing_refused_for_the_rate_limit_stops_the_cli_with_exit_1(tmp_path, fake_github, bot_env, capsys):
    _org(tmp_path, fake_github)
    fake_github.limit_rate(0, 7200)
    code = main(["bot", "sweep", "acme", "--data-dir", str(bot_env), "--max-wait", "10"])
    out = capsys.readouterr().out
    assert code == 1
    assert "stopped: no repository listed: GitHub's rate limit" in " ".join(out.split())
    assert fake_github.pulls("acme/app") == []


def test_a_window_running_out_is_waited_for_before_the_next_repository(tmp_path, fake_github):
    _org(tmp_path, fake_github)
    fake_github.limit_rate(3, 3)  # three requests left, the window resets within 3 s
    waits: list[float] = []
    sweeper = _sweeper(fake_github, tmp_path / "data", waits, dry_run=True, reserve=10)
    sweeper.sleep = lambda s: (waits.append(s), time.sleep(s))[1]
    report = sweeper.sweep("acme")
    assert report.stopped is None and waits and all(w <= 5 for w in waits)
    assert not [r for r in fake_github.requests if r.status == 403]


def test_the_cap_leaves_the_rest_for_the_next_run(tmp_path, fake_github, monkeypatch):
    _org(tmp_path, fake_github)
    report = _sweeper(fake_github, tmp_path / "data", max_prs=0).sweep("acme")
    by = {r.repo: r for r in report.results}
    assert by["acme/app"].outcome == "skipped" and "cap of 0 pull request(s) is reached" in by["acme/app"].reason
    assert fake_github.pulls("acme/app") == []
    # not recorded: the next run (with room) looks at it again
    from agent.prbot.sweep.store import SweepStore

    store = SweepStore(tmp_path / "data" / "github" / "github.db")
    assert store.get("acme/app") is None and store.get("acme/docs") is not None
    store.close()


def test_the_client_reads_githubs_rate_limit_and_link_headers():
    h = httpx.Headers({"x-ratelimit-remaining": "0", "x-ratelimit-reset": "2000"})
    assert retry_at(403, h, now=1000.0) == 2000.0
    assert retry_at(429, httpx.Headers({"retry-after": "30"}), now=1000.0) == 1030.0
    assert retry_at(429, httpx.Headers({}), now=1000.0) == 1060.0  # a secondary limit that names no time
    assert retry_at(403, httpx.Headers({"x-ratelimit-remaining": "12"}), now=1000.0) is None  # a plain refusal
    secondary = "You have exceeded a secondary rate limit. Please wait a few minutes before you try again."
    assert retry_at(403, httpx.Headers({"x-ratelimit-remaining": "12"}), now=1000.0, message=secondary) == 1060.0
    assert retry_at(404, h, now=1000.0) is None
    api = "https://ghe.example/api/v3"
    link = f'<{api}/organizations/9/repos?page=3>; rel="next", <{api}/organizations/9/repos?page=9>; rel="last"'
    assert next_link(link, api) == "/organizations/9/repos?page=3"
    assert next_link('<https://elsewhere.example/x?page=2>; rel="next"', api) is None
    assert next_link(f'<{api}/x?page=1>; rel="prev"', api) is None and next_link(None, api) is None


def test_a_plain_refusal_is_not_a_rate_limit(tmp_path, fake_github):
    fake_github.add_repo("acme/app")
    fake_github.fail_next("GET", r"/orgs/acme/repos", 403, "Resource not accessible by integration")
    sweeper = _sweeper(fake_github, tmp_path / "data")
    with pytest.raises(GitHubError) as caught:
        sweeper.sweep("acme")
    assert caught.value.status == 403 and caught.value.retry_at is None


def test_a_github_app_lists_the_organisation_through_its_installation_there():
    from pydantic import SecretStr

    pem, public = app_key_pair()
    fake = FakeGitHub(app_public_key=public, app_id=4242)
    try:
        fake.add_repo("acme/app")
        config = GitHubConfig(api_url=fake.url, app_id=4242, private_key=SecretStr(pem),
                              webhook_secret=SecretStr("x" * 32))
        with GitHubClient(config) as gh:
            assert [r.full_name for r in gh.org_repos("acme")] == ["acme/app"]
            assert gh.rate is not None and gh.rate.remaining < 5000
        assert len(fake.of("GET", "/orgs/acme/installation")) == 1 and fake.errors == []
    finally:
        fake.close()


def test_the_sweep_needs_credentials_and_a_run_command_but_no_webhook_secret(tmp_path, fake_github, bot_env,
                                                                             monkeypatch, capsys):
    assert GitHubConfig.from_env({"FERRY_GITHUB_TOKEN": "t"}, webhook=False) is not None
    monkeypatch.delenv("FERRY_GITHUB_RUN")
    assert main(["bot", "sweep", "acme", "--data-dir", str(bot_env)]) == 2
    assert "no run command: give --run" in capsys.readouterr().err
    assert main(["bot", "sweep", "acme!", "--data-dir", str(bot_env), "--run", "python prog.py"]) == 2
    assert "is not an organisation's name" in capsys.readouterr().err
    monkeypatch.delenv("FERRY_GITHUB_TOKEN")
    assert main(["bot", "sweep", "acme", "--data-dir", str(bot_env), "--run", "python prog.py"]) == 2
    assert "no GitHub credentials" in capsys.readouterr().err
    assert fake_github.requests == []


def test_a_second_sweep_of_the_same_organisation_while_one_runs_does_nothing(tmp_path, fake_github, bot_env,
                                                                             capsys):
    import fcntl

    lock = bot_env / "github" / "sweep-acme.lock"
    lock.parent.mkdir(parents=True)
    with lock.open("a") as held:
        fcntl.flock(held, fcntl.LOCK_EX | fcntl.LOCK_NB)
        assert main(["bot", "sweep", "ACME", "--data-dir", str(bot_env)]) == 2
    assert "another sweep of ACME is running" in capsys.readouterr().err
    assert fake_github.requests == []


def test_an_unquoted_run_command_is_answered_with_the_sweeps_own_usage_and_the_quoted_form(capsys):
    assert main(["bot", "sweep", "acme", "--run", "python", "train.py", "--steps", "8"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("usage: ferry bot sweep ")
    assert 'quote it, --run "python train.py --steps 8"' in err


def test_a_repository_larger_than_the_size_cap_is_skipped_and_never_cloned(tmp_path, fake_github):
    _org(tmp_path, fake_github)  # the fake lists each repository with commits as 12 KB
    report = _sweeper(fake_github, tmp_path / "data", dry_run=True, max_size_mb=0.01).sweep("acme")
    by = {r.repo: r for r in report.results}
    assert by["acme/app"].outcome == "skipped" and "larger than the sweep's --max-size of 0.01 MB" in \
        by["acme/app"].reason
    assert not fake_github.of("GET", r"/repos/acme/app/pulls")  # not looked at further
    assert {r.outcome for r in _sweeper(fake_github, tmp_path / "data", dry_run=True).sweep("acme").results
            if r.repo == "acme/app"} == {"would_open"}  # the default cap (2048 MB) takes it
