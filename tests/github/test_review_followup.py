"""Review follow-up end to end: a real `ferry serve`, a real migration's pull request, the fake GitHub API on
loopback and a bare git remote. A collaborator's "don't change the synchronize here" on a line Ferry wrote
becomes a new commit that undoes that one site (after a person's own commit, which is kept), a reply in the
thread and the thread resolved; a non-collaborator's comment does nothing; redeliveries, a replay and the
review that holds the comment start nothing more; a `/ferry try again` in a thread runs the migration from the
branch's head (a person's commits there included) and leaves the reverted site as the review left it."""

from __future__ import annotations

import pytest
from test_webhook import _comment, _deliver, _git, _now, _remote, _server, _wait, serve  # noqa: F401 (a fixture)

# two synchronize calls: the migration rewrites both (FRY013); the reviewer wants the guarded one kept as it was
SYNCED = '''import os

import torch

device = torch.device("cuda")
x = torch.arange(6, dtype=torch.float32).cuda()
w = torch.ones(6, device="cuda")
for step in range(3):
    total = ((x + step) * w).sum()
    torch.cuda.synchronize()
    if os.environ.get("PROG_SYNC_TWICE") == "1":
        torch.cuda.synchronize()
    print(f"step {step} loss {total.item():.6f}")
'''
BRANCH = "ferry/migrate-tpx"


def _review_event(fake, full_name: str, number: int, comment: dict, user: str) -> dict:
    repo = fake.repos[full_name]
    pull = {**fake._pull_json(repo, number), "updated_at": _now()}
    return {"action": "created", "comment": comment, "pull_request": pull,
            "repository": {"full_name": full_name, "default_branch": "main"}, "sender": {"login": user}}


def _job_state(server, delivery: str) -> str | None:
    got = server.client.get(f"/v1/github/jobs/{delivery}")
    return got.json()["state"] if got.status_code == 200 else None


@pytest.mark.slow
def test_a_review_comment_reverts_that_site_only_on_top_of_a_persons_commit_and_resolves_its_thread(
        tmp_path, fake_github, serve):  # noqa: F811
    bare = _remote(tmp_path, "acme/app", {"main": {"prog.py": SYNCED}})
    fake_github.add_repo("acme/app", bare=bare)
    fake_github.set_permission("acme/app", "ann", "write")
    server = _server(tmp_path, fake_github, serve)
    assert _deliver(server, "issue_comment", _comment("acme/app", 5, "ann", "/ferry migrate")).json()["accepted"]
    _wait(lambda: any("pull request opened" in c for c in fake_github.comments("acme/app", 5)), "the PR")
    ferry_head = _git(bare, "rev-parse", f"refs/heads/{BRANCH}")
    migrated = _git(bare, "show", f"{ferry_head}:prog.py")
    assert migrated.count("torch.cuda.synchronize()") == 0 and migrated.count(".synchronize()") == 2

    # a person pushes a commit of their own onto Ferry's branch: a line above the site (its lines move down)
    work = tmp_path / "person"
    _git(tmp_path, "clone", "-q", "--branch", BRANCH, str(bare), str(work))
    (work / "prog.py").write_text("# checked by ann\n" + migrated + "\n")
    _git(work, "-c", "user.name=Ann", "-c", "user.email=ann@example.com", "commit", "-qam", "a note")
    _git(work, "push", "-q", "origin", BRANCH)
    person = _git(bare, "rev-parse", f"refs/heads/{BRANCH}")
    lines = _git(bare, "show", f"{person}:prog.py").splitlines()
    site = next(i for i, ln in enumerate(lines, 1) if ".synchronize()" in ln and ln.startswith("        "))
    other = next(i for i, ln in enumerate(lines, 1) if ".synchronize()" in ln and i != site)

    # someone without access says the same thing first: nothing happens (no reply, no commit)
    eve = fake_github.add_review_comment("acme/app", 1, "eve", "don't change the synchronize here", path="prog.py",
                                         line=site, commit_id=person)
    assert _deliver(server, "pull_request_review_comment", _review_event(fake_github, "acme/app", 1, eve, "eve"),
                    delivery="rc-eve").json()["accepted"]
    _wait(lambda: _job_state(server, "rc-eve") == "done", "eve's comment's job")
    assert fake_github.thread("acme/app", eve["id"]) == [fake_github.repos["acme/app"].review_comments[eve["id"]]]
    assert _git(bare, "rev-parse", f"refs/heads/{BRANCH}") == person

    ann = fake_github.add_review_comment("acme/app", 1, "ann", "don't change the synchronize here", path="prog.py",
                                         line=site, commit_id=person)
    event = _review_event(fake_github, "acme/app", 1, ann, "ann")
    assert _deliver(server, "pull_request_review_comment", event, delivery="rc-ann").json()["accepted"]
    _wait(lambda: len(fake_github.thread("acme/app", ann["id"])) == 2, "the reply in the thread")
    reply = fake_github.thread("acme/app", ann["id"])[1]
    assert reply["user"]["login"] == "ferry-bot" and reply["in_reply_to_id"] == ann["id"]
    assert reply["body"].startswith(f"Reverted FRY013 at `prog.py line {site}` only")
    assert "`python prog.py` on tpx: passed (exit 0)" in reply["body"], reply["body"]
    resolved = fake_github.repos["acme/app"].resolved
    _wait(lambda: ann["id"] in resolved, "the thread resolved (after the reply)")
    assert ann["id"] in resolved and eve["id"] not in resolved

    # a new commit on the person's: the site alone is back to CUDA's call, everything else as it was
    head = _git(bare, "rev-parse", f"refs/heads/{BRANCH}")
    assert _git(bare, "rev-parse", f"{head}^") == person
    after = _git(bare, "show", f"{head}:prog.py").splitlines()
    assert after[site - 1] == "        torch.cuda.synchronize()" and after[other - 1] == lines[other - 1]
    assert [ln for i, ln in enumerate(after) if i != site - 1] == [ln for i, ln in enumerate(lines) if i != site - 1]
    assert _git(bare, "log", "-1", "--format=%an <%ae>", head) == "Ferry Bot <bot@example.com>"
    assert f"Ferry-Review-Comment: {ann['id']}" in _git(bare, "log", "-1", "--format=%B", head)
    assert f"`{head[:12]}`" in reply["body"]
    # the new head has its own check run, as the migration's head has: the runs passed, the site a notice;
    # never success, since parity was not checked again for the revert (a verdict claims only what was shown)
    revert_check = next(c for c in fake_github.checks("acme/app") if c["head_sha"] == head)
    assert revert_check["conclusion"] == "neutral" and "check run `Ferry migration`" in reply["body"]
    assert "parity not checked again" in revert_check["output"]["title"] + revert_check["output"]["summary"]
    assert ("prog.py", site, "notice") in [(a["path"], a["start_line"], a["annotation_level"])
                                           for a in revert_check["annotations"]]

    # GitHub redelivers it, someone replays it under a new id, the review that holds it arrives: nothing more
    again = _deliver(server, "pull_request_review_comment", event, delivery="rc-ann")
    assert again.json()["duplicate"] is True
    assert _deliver(server, "pull_request_review_comment", event).json()["duplicate"] is True
    pull = {**fake_github._pull_json(fake_github.repos["acme/app"], 1), "updated_at": _now()}
    review = {"action": "submitted", "review": {"id": ann["pull_request_review_id"], "body": "", "state": "commented",
                                                "user": {"login": "ann"}, "submitted_at": _now()},
              "pull_request": pull, "repository": {"full_name": "acme/app", "default_branch": "main"},
              "sender": {"login": "ann"}}
    assert _deliver(server, "pull_request_review", review, delivery="rv-ann").json()["accepted"]
    _wait(lambda: _job_state(server, "rv-ann") == "done", "the review's job")
    assert "0 of its 1 comment(s) queued" in server.client.get("/v1/github/jobs/rv-ann").json()["outcome"]
    assert len(fake_github.thread("acme/app", ann["id"])) == 2
    assert _git(bare, "rev-parse", f"refs/heads/{BRANCH}") == head

    # the person adds CUDA code of their own, then asks for a new attempt in another thread: the migration runs
    # from their head, its commit goes on top, and the reverted site stays as the review left it
    _git(work, "pull", "-q", "origin", BRANCH)
    (work / "prog.py").write_text((work / "prog.py").read_text() + "z = torch.zeros(2).cuda()\nprint(z.sum().item())\n")
    _git(work, "-c", "user.name=Ann", "-c", "user.email=ann@example.com", "commit", "-qam", "more")
    _git(work, "push", "-q", "origin", BRANCH)
    second = _git(bare, "rev-parse", f"refs/heads/{BRANCH}")
    pull = fake_github.repos["acme/app"].pulls[1]
    pull["body"] = "Ann: merge after the release.\n\n" + pull["body"] + "\nAnn again, below.\n"  # a person's words
    retry = fake_github.add_review_comment("acme/app", 1, "ann", '/ferry migrate --run "python prog.py 2"',
                                           path="prog.py", line=other, commit_id=second)
    assert _deliver(server, "pull_request_review_comment",
                    _review_event(fake_github, "acme/app", 1, retry, "ann")).json()["accepted"]
    _wait(lambda: len(fake_github.thread("acme/app", retry["id"])) == 2, "the retry's reply")
    _wait(lambda: retry["id"] in fake_github.repos["acme/app"].resolved, "the retry's thread resolved")
    said = fake_github.thread("acme/app", retry["id"])[1]["body"]
    assert said.startswith(f"Ran the migration again on `{BRANCH}` from `{second[:12]}`"), said
    assert "FRY013 left out, as a review of this branch reverted it" in said
    final = _git(bare, "rev-parse", f"refs/heads/{BRANCH}")
    assert final != second and _git(bare, "merge-base", "--is-ancestor", second, final) == ""
    text = _git(bare, "show", f"{final}:prog.py")
    assert "torch.zeros(2).cuda()" not in text and text.splitlines()[site - 1] == "        torch.cuda.synchronize()"
    assert f"`{_git(bare, 'rev-parse', '--short=12', final)}`" in said
    assert "**migrated**" in said and retry["id"] in fake_github.repos["acme/app"].resolved
    # the head a person now sees has its check run, and the pull request's text describes it: the attempt's
    # commands, verdict and commits in Ferry's part, the person's words around it kept
    assert any(c["head_sha"] == final and c["conclusion"] == "success" for c in fake_github.checks("acme/app"))
    body = pull["body"]
    assert body.startswith("Ann: merge after the release.\n\n<!-- ferry:begin") and body.endswith(
        "<!-- ferry:end -->\n\nAnn again, below.\n"), body
    assert "--run 'python prog.py 2'" in body and "--run 'python prog.py'" not in body
    assert "## Latest attempt (asked in a review)" in body and f"it ran from `{second[:12]}`" in body
    assert f"`{final[:10]}`" in body and "**Status:** migrated" in body and "the latest attempt" in body
    assert fake_github.errors == []
