"""The verdict as a check run: a real `ferry serve` and real migrations against the fake GitHub API on
loopback. The check run on the pushed head with its conclusion and the findings at their lines, the
review requested from whoever asked, a refused SARIF upload that fails nothing, a partial migration's
draft made ready by a later migrated run; and the check-run requests themselves (50 annotations a
request, the rest in updates)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
from fake_github import FakeGitHub
from pydantic import SecretStr
from test_webhook import _comment, _deliver, _git, _remote, _server, _wait, serve  # noqa: F401  (serve: a fixture)

from agent.prbot.github.client import GitHubClient, GitHubError
from agent.prbot.github.config import GitHubConfig
from agent.prbot.github.webhook import Trigger
from agent.prbot.jobs import GitHubJobs

# (the end-to-end tests import nothing new of Ferry's: they also run, and fail, on the code before check runs)
CHECK_NAME = "Ferry migration"

# lines 6 and 7: CUDA device strings no rule rewrites (scan: review); line 10: .item() in the loop (profile)
REVIEWED = '''import torch

device = torch.device("cuda")
x = torch.arange(6, dtype=torch.float32).cuda()
w = torch.ones(6, device="cuda")
KINDS = {"gpu": "cuda"}
name = "cuda" + ":0"
for step in range(3):
    total = ((x + step) * w).sum()
    print(f"step {step} loss {total.item():.6f}")
'''

# the model's work stays on CPU behind a switch no rule turns on: partial (the .cuda() is still rewritten)
SWITCHED = '''import os

import torch

device = torch.device("cuda" if os.environ.get("USE_GPU") == "1" else "cpu")
scale = torch.ones(1).cuda()
x = torch.randn(64, 64, device=device)
for step in range(3):
    y = (x @ x).relu().sum() + scale.sum().cpu()
    print(f"step {step} loss {y.item():.6f}")
'''


def _head(bare: Path, branch: str = "ferry/migrate-tpx") -> str:
    return _git(bare, "rev-parse", f"refs/heads/{branch}")


def _done(fake: FakeGitHub, full_name: str, number: int) -> bool:
    return any("; pull request opened" in c or "; pull request updated" in c for c in fake.comments(full_name, number))


@pytest.mark.slow
def test_the_verdict_is_a_check_run_with_the_findings_at_their_lines_and_review_is_requested(
        tmp_path, fake_github, serve):  # noqa: F811
    bare = _remote(tmp_path, "acme/app", {"main": {"prog.py": REVIEWED}})
    fake_github.add_repo("acme/app", bare=bare)
    fake_github.set_permission("acme/app", "ann", "write")
    # code scanning is off in this repository: GitHub refuses the SARIF, the job goes on
    fake_github.fail_next("POST", r"/repos/acme/app/code-scanning/sarifs", 403,
                          "Advanced Security must be enabled for this repository to use code scanning.")
    server = _server(tmp_path, fake_github, serve)
    assert _deliver(server, "issue_comment", _comment("acme/app", 5, "ann", "/ferry migrate"),
                    delivery="c-1").json()["accepted"]
    _wait(lambda: _done(fake_github, "acme/app", 5), "the pull request")

    (run,) = fake_github.checks("acme/app")
    assert run["name"] == CHECK_NAME and run["head_sha"] == _head(bare) and run["status"] == "completed"
    assert run["conclusion"] == "success"
    assert run["output"]["title"].startswith("migrated: runs on tpx")
    assert "parity: pass, 4 tensors" in run["output"]["summary"]
    at = {(a["path"], a["start_line"], a["annotation_level"]) for a in run["annotations"]}
    assert {("prog.py", 6, "warning"), ("prog.py", 7, "warning"), ("prog.py", 10, "notice")} <= at, at
    assert all(a["end_line"] == a["start_line"] for a in run["annotations"])
    lines = _git(bare, "show", f"{_head(bare)}:prog.py").splitlines()  # the head's lines, as annotated
    assert '"cuda"' in lines[5] and '"cuda"' in lines[6] and ".item()" in lines[9]

    (pull,) = fake_github.pulls("acme/app")
    assert pull["draft"] is False and pull["reviewers"] == ["ann"]
    (sarif,) = fake_github.of("POST", "/repos/acme/app/code-scanning/sarifs")
    assert sarif.status == 403 and sarif.body["commit_sha"] == _head(bare)
    assert sarif.body["ref"] == "refs/heads/ferry/migrate-tpx"
    said = fake_github.comments("acme/app", 5)[-1]
    assert "**migrated**" in said and "pull request opened" in said and f"`{CHECK_NAME}`" in said
    assert "https://github.example/acme/app/runs/1" in said
    assert server.client.get("/v1/github/jobs/c-1").json()["state"] == "done"
    assert fake_github.errors == []


@pytest.mark.slow
def test_a_partial_migration_opens_a_draft_and_a_migrated_rerun_marks_it_ready(tmp_path, fake_github, serve):  # noqa: F811
    bare = _remote(tmp_path, "acme/switch", {"main": {"prog.py": SWITCHED}})
    fake_github.add_repo("acme/switch", bare=bare)
    fake_github.set_permission("acme/switch", "ann", "write")
    fake_github.set_permission("acme/switch", "bob", "maintain")
    server = _server(tmp_path, fake_github, serve)
    assert _deliver(server, "issue_comment", _comment("acme/switch", 2, "ann", "/ferry migrate")).json()["accepted"]
    _wait(lambda: _done(fake_github, "acme/switch", 2), "the draft")
    (pull,) = fake_github.pulls("acme/switch")
    assert pull["draft"] is True and pull["head"] == "ferry/migrate-tpx" and pull["reviewers"] == ["ann"]
    said = fake_github.comments("acme/switch", 2)[-1]
    assert "**partial**" in said and "opened as a draft" in said
    (run,) = fake_github.checks("acme/switch")
    assert run["conclusion"] == "neutral" and run["head_sha"] == _head(bare)
    assert "stayed on CPU" in run["output"]["summary"]
    assert sarif_ok(fake_github, "acme/switch", _head(bare))

    # the device switch is fixed on main: the re-run migrates, updates the same pull request and makes it ready
    seed = tmp_path / "seed-acme-switch"
    (seed / "prog.py").write_text(SWITCHED.replace('"cuda" if os.environ.get("USE_GPU") == "1" else "cpu"',
                                                   '"cuda"'))
    _git(seed, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qam", "use the GPU")
    _git(seed, "push", "-q", str(bare), "main")
    assert _deliver(server, "issue_comment", _comment("acme/switch", 3, "bob", "/ferry migrate")).json()["accepted"]
    _wait(lambda: _done(fake_github, "acme/switch", 3), "the update")
    (pull,) = fake_github.pulls("acme/switch")
    assert pull["draft"] is False and pull["reviewers"] == ["ann", "bob"]
    assert "marked ready for review" in fake_github.comments("acme/switch", 3)[-1]
    assert len(fake_github.of("POST", "/graphql")) == 1
    runs = fake_github.checks("acme/switch")
    assert [r["conclusion"] for r in runs] == ["neutral", "success"] and runs[1]["head_sha"] == _head(bare)
    assert fake_github.errors == []


def sarif_ok(fake: FakeGitHub, full_name: str, head: str) -> bool:
    """Code scanning took the scan of the pushed head: a SARIF 2.1.0 log of ferry-scan's results."""
    (upload,) = fake.repos[full_name].sarifs
    run = upload["log"]["runs"][0]
    return upload["commit_sha"] == head and run["tool"]["driver"]["name"] == "ferry-scan"


def _result(findings: list, status: str = "migrated"):
    from agent.prbot.pr.models import PrResult

    return PrResult(migration_id="m", status=status, summary="runs on tpx", base="main", base_sha="b" * 40,
                    branch="ferry/migrate-tpx", head="a" * 40, title="t", body="b", out_dir="/o", pr_text="/o/pr.md",
                    parity="parity: pass, 2 tensors", findings=findings)


def test_annotations_go_fifty_a_request_and_the_rest_in_updates_of_the_same_check_run(tmp_path):
    from agent.prbot.pr.models import Finding

    fake = FakeGitHub()
    try:
        fake.add_repo("acme/big")
        config = GitHubConfig(api_url=fake.url, token=SecretStr(fake.token), webhook_secret=SecretStr("x" * 20))
        jobs = GitHubJobs(tmp_path, config, GitHubClient(config))
        findings = [Finding(path=f"src/m{i % 3}.py", line=i + 1, level="warning" if i % 2 else "notice",
                            title=f"f{i}", message=f"finding {i}") for i in range(120)]
        t = Trigger(delivery="d", event="issue_comment", owner="acme", repo="big", number=1, is_pull=False,
                    sender="ann", run_command="python p.py")
        said = jobs._check(t, _result(findings), "main", "a" * 40)
        assert "check run `Ferry migration`: https://github.example/acme/big/runs/1" in said
        sizes = [len(r.body["output"].get("annotations", [])) for r in fake.requests]
        assert [r.method for r in fake.requests] == ["POST", "PATCH", "PATCH"] and sizes == [50, 50, 20]
        (run,) = fake.checks("acme/big")
        assert [a["start_line"] for a in run["annotations"]] == list(range(1, 121))
        assert "60 left for review, 60 from the profile" in run["output"]["summary"]
        # a check run GitHub refuses (a personal token may not write checks) ends no job: the comment says so
        fake.fail_next("POST", r"/repos/acme/big/check-runs", 403, "Resource not accessible by personal access token")
        refused = jobs._check(t, _result([]), "main", "a" * 40)
        assert "No check run: GitHub answered" in refused and "Resource not accessible" in refused
        jobs.store.close()
    finally:
        fake.close()


def test_the_conclusion_follows_the_verdict_and_graphql_sits_beside_the_rest_api():
    from agent.prbot.checks import check_requests, conclusion_of
    from agent.prbot.github.client import graphql_url

    assert [conclusion_of(s) for s in ("migrated", "partial", "needs_llm", "needs_human", "failed_timeout",
                                       "failed_internal")] == ["success", "neutral", "neutral", "neutral", "failure",
                                                               "failure"]
    create, updates = check_requests(_result([], status="failed_sandbox"), "main", "c" * 40)
    assert create["conclusion"] == "failure" and "annotations" not in create["output"] and updates == []
    assert graphql_url("https://api.github.com") == "https://api.github.com/graphql"
    assert graphql_url("https://ghe.example/api/v3/") == "https://ghe.example/api/graphql"


def test_a_head_sha_not_pushed_is_refused_by_the_fake(tmp_path):
    """The fake checks what GitHub checks: a check run on a commit the repository does not hold is a 422."""
    bare = tmp_path / "r.git"
    subprocess.run(["git", "init", "-q", "--bare", str(bare)], check=True)
    fake = FakeGitHub()
    try:
        fake.add_repo("acme/r", bare=bare)
        config = GitHubConfig(api_url=fake.url, token=SecretStr(fake.token), webhook_secret=SecretStr("x" * 20))
        with GitHubClient(config) as client, pytest.raises(GitHubError, match="No commit found"):
            client.create_check_run("acme", "r", {"name": CHECK_NAME, "head_sha": "d" * 40, "status": "completed",
                                                  "conclusion": "success", "output": {"title": "t", "summary": "s"}})
    finally:
        fake.close()
