"""The GitHub client against the fake API on loopback: its headers and credentials (a token, or a GitHub
App's JWT exchanged for a cached installation token), the pull request calls, retries only where safe,
and errors that say what GitHub said without a token."""

from __future__ import annotations

import pytest
from fake_github import FakeGitHub, app_key_pair
from pydantic import SecretStr

from agent.prbot.github.client import GitHubClient, GitHubError
from agent.prbot.github.config import GitHubConfig, GitHubConfigError

SECRET = "s3cret-s3cret-s3cret"


def _config(fake: FakeGitHub, **kw: object) -> GitHubConfig:
    return GitHubConfig(api_url=fake.url, token=SecretStr(fake.token), webhook_secret=SecretStr(SECRET), **kw)


def test_pull_requests_comments_and_permissions_through_the_token(fake_github):
    fake_github.add_repo("acme/app")
    fake_github.set_permission("acme/app", "ann", "write")
    with GitHubClient(_config(fake_github)) as gh:
        assert gh.permission(["acme", "app"][0], "app", "ann") == "write"
        assert gh.permission("acme", "app", "mallory") == "none"  # GitHub's 404: no access at all
        assert gh.repository("acme", "app").default_branch == "main"
        assert gh.find_pull("acme", "app", "ferry/migrate-tpx") is None
        pr = gh.open_pull("acme", "app", head="ferry/migrate-tpx", base="main", title="T", body="B")
        assert pr.number == 1 and pr.head.ref == "ferry/migrate-tpx"
        again = gh.find_pull("acme", "app", "ferry/migrate-tpx", "main")
        assert again is not None and again.number == 1
        assert gh.update_pull("acme", "app", 1, title="T2", body="B2").title == "T2"
        assert gh.comment("acme", "app", 1, "hello").body == "hello"
    assert fake_github.comments("acme/app", 1) == ["hello"] and fake_github.pulls("acme/app")[0]["body"] == "B2"
    assert all(r.headers["Authorization"] == f"Bearer {fake_github.token}" for r in fake_github.requests)
    post = fake_github.of("POST", "/repos/acme/app/pulls")[0]
    assert post.body == {"title": "T", "head": "ferry/migrate-tpx", "base": "main", "body": "B",
                         "maintainer_can_modify": True, "draft": False}
    assert fake_github.of("GET", "/repos/acme/app/pulls")[0].query["head"] == ["acme:ferry/migrate-tpx"]
    assert [e for e in fake_github.errors] == []


def test_a_wrong_token_is_an_error_that_does_not_show_it(fake_github):
    fake_github.add_repo("acme/app")
    cfg = GitHubConfig(api_url=fake_github.url, token=SecretStr("ghp_wrong_token_value"),
                       webhook_secret=SecretStr(SECRET))
    with GitHubClient(cfg) as gh, pytest.raises(GitHubError) as err:
        gh.comment("acme", "app", 1, "x")
    assert err.value.status == 401 and "Bad credentials" in str(err.value) and "ghp_wrong" not in str(err.value)


def test_gets_are_retried_once_on_a_gateway_error_and_posts_never(fake_github):
    fake_github.add_repo("acme/app")
    with GitHubClient(_config(fake_github)) as gh:
        fake_github.fail_next("GET", "/repos/acme/app", 502, "bad gateway")
        assert gh.repository("acme", "app").full_name == "acme/app"
        assert len(fake_github.of("GET", "/repos/acme/app")) == 2
        fake_github.fail_next("POST", "/repos/acme/app/issues/3/comments", 502, "bad gateway")
        with pytest.raises(GitHubError) as err:
            gh.comment("acme", "app", 3, "once")
        assert err.value.status == 502 and len(fake_github.of("POST", "/repos/acme/app/issues/3/comments")) == 1
        fake_github.fail_next("GET", "/repos/acme/app/pulls/9", 200, "no pull request here")  # not a PullRequest
        with pytest.raises(GitHubError, match="not a PullRequest"):
            gh.pull("acme", "app", 9)


def test_a_github_app_signs_a_jwt_and_caches_its_installation_token():
    pem, public = app_key_pair()
    fake = FakeGitHub(app_public_key=public, app_id=4242)
    try:
        fake.add_repo("acme/app")
        cfg = GitHubConfig(api_url=fake.url, app_id=4242, private_key=SecretStr(pem), webhook_secret=SecretStr(SECRET))
        with GitHubClient(cfg) as gh:
            gh.comment("acme", "app", 1, "one")
            gh.comment("acme", "app", 1, "two")
            token = gh.git_token("acme", "app")
        assert token is not None and token.startswith("ghs_")
        assert len(fake.of("GET", "/repos/acme/app/installation")) == 1
        assert len(fake.of("POST", "/app/installations/77/access_tokens")) == 1  # cached for the second call
        assert fake.comments("acme/app", 1) == ["one", "two"] and fake.errors == []
        wrong = GitHubConfig(api_url=fake.url, app_id=1, private_key=SecretStr(pem), webhook_secret=SecretStr(SECRET))
        with GitHubClient(wrong) as gh, pytest.raises(GitHubError) as err:
            gh.comment("acme", "app", 1, "three")
        assert err.value.status == 401
    finally:
        fake.close()


@pytest.mark.parametrize(("env", "says"), [
    ({"FERRY_GITHUB_TOKEN": "ghp_x"}, "FERRY_GITHUB_WEBHOOK_SECRET is not set"),
    ({"FERRY_GITHUB_WEBHOOK_SECRET": "short"}, "shorter than 16"),
    ({"FERRY_GITHUB_WEBHOOK_SECRET": SECRET}, "no GitHub credentials"),
    ({"FERRY_GITHUB_WEBHOOK_SECRET": SECRET, "FERRY_GITHUB_APP_ID": "12"}, "needs both"),
    ({"FERRY_GITHUB_WEBHOOK_SECRET": SECRET, "FERRY_GITHUB_TOKEN": "t", "FERRY_GITHUB_API_URL": "http://gh.example"},
     "must be an https:// URL"),
    ({"FERRY_GITHUB_WEBHOOK_SECRET": SECRET, "FERRY_GITHUB_TOKEN": "t", "FERRY_GITHUB_CLONE_URL": "/srv/x.git"},
     "must hold {owner} and {repo}"),
])
def test_configuration_errors_name_the_variable(env, says):
    with pytest.raises(GitHubConfigError, match=says.replace("{", r"\{").replace("}", r"\}")) as err:
        GitHubConfig.from_env(env)
    assert SECRET not in str(err.value)
    assert GitHubConfig.from_env({}) is None
    ok = GitHubConfig.from_env({"FERRY_GITHUB_WEBHOOK_SECRET": SECRET, "FERRY_GITHUB_TOKEN": "ghp_t",
                                "FERRY_GITHUB_API_URL": "https://ghe.example/api/v3/"})
    assert ok is not None and ok.api_url == "https://ghe.example/api/v3" and ok.label == "ferry-migrate"
