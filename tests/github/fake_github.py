"""A fake GitHub REST API on loopback: the endpoints Ferry's PR bot uses, with in-memory state, and every
request recorded and validated (the auth header, the API headers, the JSON bodies, that a pull
request's head branch was pushed to the backing bare repository before the pull request is opened, and
that a check run names a pushed commit and carries at most 50 annotations per request). GraphQL's
``markPullRequestReadyForReview`` is answered at ``/graphql``; SARIF uploads are decoded and kept.
Review comments live in threads (a reply names the thread's first comment, as GitHub requires), and
GraphQL's ``reviewThreads`` and ``resolveReviewThread`` list and resolve them.
An organisation's repositories are listed as GitHub does (``GET /orgs/{org}/repos``, paged with a ``Link``
header whose next page is ``/organizations/{id}/repos``), and every answer carries the rate-limit headers
(``limit_rate`` empties the window: requests are then refused with 403 until it resets)."""

from __future__ import annotations

import base64
import binascii
import gzip
import json
import re
import secrets
import subprocess
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit


def app_key_pair() -> tuple[str, str]:
    """A fresh GitHub App key pair as PEM text: (private key for the app's config, public key for FakeGitHub)."""
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import rsa

    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    pem = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                            serialization.NoEncryption()).decode()
    public = key.public_key().public_bytes(serialization.Encoding.PEM,
                                           serialization.PublicFormat.SubjectPublicKeyInfo).decode()
    return pem, public


@dataclass
class Recorded:
    method: str
    path: str
    query: dict[str, list[str]]
    headers: dict[str, str]
    body: Any
    status: int = 0
    at: float = field(default_factory=time.monotonic)
    reply_headers: dict[str, str] = field(default_factory=dict)


@dataclass
class Repo:
    full_name: str
    default_branch: str
    bare: Path | None
    permissions: dict[str, str] = field(default_factory=dict)
    pulls: dict[int, dict[str, Any]] = field(default_factory=dict)
    comments: dict[int, list[dict[str, Any]]] = field(default_factory=dict)
    check_runs: dict[int, dict[str, Any]] = field(default_factory=dict)
    sarifs: list[dict[str, Any]] = field(default_factory=list)
    review_comments: dict[int, dict[str, Any]] = field(default_factory=dict)  # id -> its JSON (+ "pull")
    resolved: set[int] = field(default_factory=set)  # the first comments of the resolved threads
    next_number: int = 1
    archived: bool = False
    fork: bool = False
    push: bool = True  # the credentials may push (the listing's permissions.push)


class FakeGitHub:
    def __init__(self, app_public_key: str | None = None, app_id: int | None = None) -> None:
        self.token = "ghp_" + secrets.token_hex(16)
        self.repos: dict[str, Repo] = {}
        self.requests: list[Recorded] = []
        self.errors: list[str] = []
        self.app_public_key, self.app_id = app_public_key, app_id
        self.installation_tokens: dict[str, float] = {}
        self._fail: list[tuple[str, re.Pattern[str], int, str, dict[str, str]]] = []
        self.rate_limit, self.rate_remaining, self.rate_reset = 5000, 5000, int(time.time()) + 3600
        self._lock = threading.Lock()
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}"
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()

    # --- setup and inspection -------------------------------------------------------------------

    def add_repo(self, full_name: str, default_branch: str = "main", bare: Path | None = None, *,
                 archived: bool = False, fork: bool = False, push: bool = True) -> Repo:
        self.repos[full_name] = Repo(full_name, default_branch, bare, archived=archived, fork=fork, push=push)
        return self.repos[full_name]

    def limit_rate(self, remaining: int, reset_in_s: float) -> None:
        """The rate-limit window now: ``remaining`` requests until ``reset_in_s`` from now (then a new one)."""
        self.rate_remaining, self.rate_reset = remaining, int(time.time() + reset_in_s)

    def set_permission(self, full_name: str, user: str, permission: str) -> None:
        self.repos[full_name].permissions[user] = permission

    def comments(self, full_name: str, number: int) -> list[str]:
        return [c["body"] for c in self.repos[full_name].comments.get(number, [])]

    def pulls(self, full_name: str) -> list[dict[str, Any]]:
        return list(self.repos[full_name].pulls.values())

    def checks(self, full_name: str) -> list[dict[str, Any]]:
        """The check runs, each with ``annotations``: all those its creation and its updates carried."""
        return list(self.repos[full_name].check_runs.values())

    def add_review_comment(self, full_name: str, number: int, user: str, body: str, *, path: str, line: int,
                           commit_id: str, in_reply_to: int | None = None,
                           review_id: int | None = None) -> dict[str, Any]:
        """A person's review comment on a line (RIGHT side) of the pull request at ``commit_id``: its JSON as
        the API and the webhook's ``comment`` give it."""
        with self._lock:
            return self._new_review_comment(self.repos[full_name], number, user, body, path=path, line=line,
                                            commit_id=commit_id, in_reply_to=in_reply_to, review_id=review_id)

    def thread(self, full_name: str, first: int) -> list[dict[str, Any]]:
        """A review thread's comments, its first one first."""
        return [c for c in self.repos[full_name].review_comments.values()
                if c["id"] == first or c.get("in_reply_to_id") == first]

    def _new_review_comment(self, repo: Repo, number: int, user: str, body: str, *, path: str, line: int | None,
                            commit_id: str, in_reply_to: int | None, review_id: int | None) -> dict[str, Any]:
        cid = 1000 + sum(len(r.review_comments) for r in self.repos.values()) + 1
        now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        c = {"id": cid, "node_id": f"PRRC_{cid}", "pull_request_review_id": review_id or cid + 50000, "body": body,
             "user": {"login": user}, "path": path, "line": line, "original_line": line, "side": "RIGHT",
             "commit_id": commit_id, "original_commit_id": commit_id, "diff_hunk": "@@ -1 +1 @@",
             "html_url": f"https://github.example/{repo.full_name}/pull/{number}#discussion_r{cid}",
             "created_at": now, "updated_at": now, "author_association": "COLLABORATOR"}
        if in_reply_to is not None:
            c["in_reply_to_id"] = in_reply_to
        repo.review_comments[cid] = {**c, "pull": number}
        return c

    def fail_next(self, method: str, path_regex: str, status: int, message: str,
                  headers: dict[str, str] | None = None) -> None:
        self._fail.append((method, re.compile(path_regex), status, message, headers or {}))

    def of(self, method: str, path_regex: str) -> list[Recorded]:
        return [r for r in self.requests if r.method == method and re.fullmatch(path_regex, r.path)]

    # --- the API --------------------------------------------------------------------------------

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def _do(self) -> None:
                parts = urlsplit(self.path)
                length = int(self.headers.get("Content-Length") or 0)
                raw = self.rfile.read(length) if length else b""
                try:
                    body = json.loads(raw) if raw else None
                except ValueError:
                    body = "<not json>"
                rec = Recorded(self.command, parts.path, parse_qs(parts.query), dict(self.headers.items()), body)
                with fake._lock:
                    fake.requests.append(rec)
                    status, answer = fake._answer(rec)
                rec.status = status
                data = json.dumps(answer).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                for name, value in rec.reply_headers.items():
                    self.send_header(name, value)
                self.end_headers()
                self.wfile.write(data)

            do_GET = do_POST = do_PATCH = _do

        return Handler

    def _error(self, rec: Recorded, status: int, message: str) -> tuple[int, dict[str, Any]]:
        if status != 404 or "collaborators" not in rec.path:
            self.errors.append(f"{rec.method} {rec.path}: {status} {message}")
        return status, {"message": message}

    def _auth_ok(self, rec: Recorded) -> bool:
        auth = rec.headers.get("Authorization", "")
        if not auth.startswith("Bearer "):
            return False
        token = auth.removeprefix("Bearer ")
        if rec.path.startswith("/app/") or rec.path.endswith("/installation"):
            return self._jwt_ok(token)
        if token == self.token:
            return True
        return self.installation_tokens.get(token, 0) > time.time()

    def _jwt_ok(self, token: str) -> bool:
        if self.app_public_key is None:
            return False
        import jwt

        try:
            claims = jwt.decode(token, self.app_public_key, algorithms=["RS256"])
        except jwt.PyJWTError:
            return False
        return str(claims.get("iss")) == str(self.app_id) and claims["exp"] - claims["iat"] <= 600

    def _answer(self, rec: Recorded) -> tuple[int, Any]:
        for i, (method, pattern, status, message, headers) in enumerate(self._fail):
            if method == rec.method and pattern.fullmatch(rec.path):
                del self._fail[i]
                rec.reply_headers.update(headers)
                return status, {"message": message}
        if rec.headers.get("Accept") != "application/vnd.github+json" or \
                rec.headers.get("X-GitHub-Api-Version") != "2022-11-28":
            return self._error(rec, 400, "missing the GitHub API headers")
        if not self._auth_ok(rec):
            return self._error(rec, 401, "Bad credentials")
        if time.time() >= self.rate_reset:  # a new window
            self.rate_remaining, self.rate_reset = self.rate_limit, int(time.time()) + 3600
        limited = self.rate_remaining <= 0
        self.rate_remaining = max(0, self.rate_remaining - 1)
        rec.reply_headers.update({"X-RateLimit-Limit": str(self.rate_limit),
                                  "X-RateLimit-Remaining": str(self.rate_remaining),
                                  "X-RateLimit-Reset": str(self.rate_reset), "X-RateLimit-Resource": "core"})
        if limited:
            return 403, {"message": "API rate limit exceeded for installation ID 77.",
                         "documentation_url": "https://docs.github.com/rest/overview/rate-limits-for-the-rest-api"}
        m = re.fullmatch(r"/orgs/([^/]+)/installation", rec.path)
        if m and rec.method == "GET":
            return 200, {"id": 77, "account": {"login": m.group(1)}}
        m = re.fullmatch(r"/orgs/([^/]+)/repos|/organizations/(\d+)/repos", rec.path)
        if m and rec.method == "GET":
            return self._org_repos(rec, m.group(1) or self._org_of(int(m.group(2))))
        if rec.path == "/graphql" and rec.method == "POST":
            return self._graphql(rec)
        m = re.fullmatch(r"/app/installations/(\d+)/access_tokens", rec.path)
        if m and rec.method == "POST":
            token = "ghs_" + secrets.token_hex(16)
            self.installation_tokens[token] = time.time() + 3600
            expires = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(time.time() + 3600))
            return 201, {"token": token, "expires_at": expires}
        m = re.fullmatch(r"/repos/([^/]+)/([^/]+)(/.*)?", rec.path)
        if not m or f"{m.group(1)}/{m.group(2)}" not in self.repos:
            return self._error(rec, 404, "Not Found")
        repo, tail = self.repos[f"{m.group(1)}/{m.group(2)}"], m.group(3) or ""
        return self._repo_api(rec, repo, tail)

    def _org_of(self, org_id: int) -> str:
        orgs = sorted({name.split("/")[0] for name in self.repos})
        return orgs[org_id - 1000] if 0 <= org_id - 1000 < len(orgs) else ""

    def _org_repos(self, rec: Recorded, org: str) -> tuple[int, Any]:
        """One page of the organisation's repositories, sorted by name, with GitHub's ``Link`` to the next
        (by the organisation's numeric id, as GitHub writes it)."""
        names = sorted(n for n in self.repos if n.split("/")[0].lower() == org.lower())
        if not names:
            return self._error(rec, 404, "Not Found")
        try:
            per_page = min(100, int(rec.query.get("per_page", ["30"])[0]))
            page = int(rec.query.get("page", ["1"])[0])
        except ValueError:
            return self._error(rec, 422, "Validation Failed: per_page and page are numbers")
        if per_page < 1 or page < 1:
            return self._error(rec, 422, "Validation Failed: per_page and page start at 1")
        chunk = names[(page - 1) * per_page: page * per_page]
        if page * per_page < len(names):
            org_id = 1000 + sorted({n.split("/")[0] for n in self.repos}).index(names[0].split("/")[0])
            last = (len(names) + per_page - 1) // per_page
            link = f"{self.url}/organizations/{org_id}/repos?type=all&per_page={per_page}&page="
            rec.reply_headers["Link"] = f'<{link}{page + 1}>; rel="next", <{link}{last}>; rel="last"'
        return 200, [self._org_repo_json(self.repos[n]) for n in chunk]

    def _empty(self, repo: Repo) -> bool:
        if repo.bare is None:
            return False
        return subprocess.run(["git", "--git-dir", str(repo.bare), "rev-parse", "--verify", "--quiet", "HEAD"],
                              capture_output=True).returncode != 0

    def _org_repo_json(self, repo: Repo) -> dict[str, Any]:
        owner, _, name = repo.full_name.partition("/")
        return {**self._repo_json(repo), "name": name, "owner": {"login": owner}, "archived": repo.archived,
                "disabled": False, "fork": repo.fork, "size": 0 if self._empty(repo) else 12,
                "permissions": {"admin": False, "maintain": False, "push": repo.push, "triage": True, "pull": True}}

    def _repo_json(self, repo: Repo) -> dict[str, Any]:
        return {"full_name": repo.full_name, "default_branch": repo.default_branch, "private": False}

    def _pull_json(self, repo: Repo, n: int) -> dict[str, Any]:
        p = repo.pulls[n]
        return {"number": n, "html_url": f"https://github.example/{repo.full_name}/pull/{n}", "state": p["state"],
                "title": p["title"], "body": p["body"],
                "draft": p.get("draft", False), "node_id": f"PR_{repo.full_name}#{n}",
                "requested_reviewers": [{"login": u} for u in p.get("reviewers", [])],
                "head": {"ref": p["head"], "sha": "0" * 40, "repo": self._repo_json(p.get("head_repo", repo))},
                "base": {"ref": p["base"], "sha": "0" * 40, "repo": self._repo_json(repo)}}

    def _branch_pushed(self, repo: Repo, branch: str) -> bool:
        if repo.bare is None:
            return True
        proc = subprocess.run(["git", "--git-dir", str(repo.bare), "rev-parse", "--verify", "--quiet",
                               f"refs/heads/{branch}"], capture_output=True)
        return proc.returncode == 0

    def _repo_api(self, rec: Recorded, repo: Repo, tail: str) -> tuple[int, Any]:
        if rec.method == "GET" and tail == "":
            return 200, self._repo_json(repo)
        if rec.method == "GET" and tail == "/installation":
            return 200, {"id": 77}
        m = re.fullmatch(r"/collaborators/([^/]+)/permission", tail)
        if m and rec.method == "GET":
            perm = repo.permissions.get(m.group(1))
            return (200, {"permission": perm}) if perm else self._error(rec, 404, "Not Found")
        if tail == "/pulls" and rec.method == "GET":
            head = rec.query.get("head", [""])[0]
            owner, _, branch = head.partition(":")
            found = [self._pull_json(repo, n) for n, p in repo.pulls.items()
                     if p["state"] == rec.query.get("state", ["open"])[0] and (not head or p["head"] == branch)
                     and owner == repo.full_name.split("/")[0]]
            return 200, found
        if tail == "/pulls" and rec.method == "POST":
            b = rec.body
            if not isinstance(b, dict) or not all(isinstance(b.get(k), str) and b.get(k) for k in
                                                  ("title", "head", "base", "body")):
                return self._error(rec, 422, "Validation Failed: title, head, base and body are required strings")
            if not self._branch_pushed(repo, b["head"]):
                return self._error(rec, 422, f"Validation Failed: head {b['head']} does not exist")
            if any(p["head"] == b["head"] and p["state"] == "open" for p in repo.pulls.values()):
                return self._error(rec, 422, f"A pull request already exists for {b['head']}")
            if not isinstance(b.get("draft", False), bool):
                return self._error(rec, 422, "Validation Failed: draft must be a boolean")
            n = repo.next_number
            repo.next_number += 1
            repo.pulls[n] = {"state": "open", "title": b["title"], "body": b["body"], "head": b["head"],
                             "base": b["base"], "draft": b.get("draft", False)}
            return 201, self._pull_json(repo, n)
        m = re.fullmatch(r"/pulls/(\d+)", tail)
        if m and int(m.group(1)) in repo.pulls:
            n = int(m.group(1))
            if rec.method == "PATCH":
                b = rec.body
                if not isinstance(b, dict) or not isinstance(b.get("title"), str) or not isinstance(b.get("body"), str):
                    return self._error(rec, 422, "Validation Failed: title and body must be strings")
                repo.pulls[n].update(title=b["title"], body=b["body"])
            return 200, self._pull_json(repo, n)
        m = re.fullmatch(r"/pulls/(\d+)/requested_reviewers", tail)
        if m and rec.method == "POST" and int(m.group(1)) in repo.pulls:
            b = rec.body
            if not isinstance(b, dict) or not isinstance(b.get("reviewers"), list) or \
                    not all(isinstance(u, str) and u for u in b["reviewers"]):
                return self._error(rec, 422, "Validation Failed: reviewers must be a list of logins")
            pull = repo.pulls[int(m.group(1))]
            pull["reviewers"] = list(dict.fromkeys([*pull.get("reviewers", []), *b["reviewers"]]))
            return 201, self._pull_json(repo, int(m.group(1)))
        if tail == "/check-runs" and rec.method == "POST":
            return self._create_check(rec, repo)
        m = re.fullmatch(r"/check-runs/(\d+)", tail)
        if m and rec.method == "PATCH" and int(m.group(1)) in repo.check_runs:
            run = repo.check_runs[int(m.group(1))]
            b = rec.body
            problem = self._output_problem(b.get("output") if isinstance(b, dict) else None)
            if problem:
                return self._error(rec, 422, f"Validation Failed: {problem}")
            run["output"] = {k: v for k, v in b["output"].items() if k != "annotations"}
            run["annotations"] += b["output"].get("annotations", [])
            return 200, self._check_json(repo, int(m.group(1)))
        if tail == "/code-scanning/sarifs" and rec.method == "POST":
            b = rec.body
            if not isinstance(b, dict) or not re.fullmatch(r"[0-9a-f]{40}", str(b.get("commit_sha"))) or \
                    not str(b.get("ref", "")).startswith("refs/"):
                return self._error(rec, 422, "Validation Failed: commit_sha and ref are required")
            try:
                log = json.loads(gzip.decompress(base64.b64decode(b.get("sarif", ""), validate=True)))
            except (binascii.Error, OSError, ValueError):
                return self._error(rec, 422, "Validation Failed: sarif is not gzip+base64 of a JSON document")
            if not isinstance(log, dict) or log.get("version") != "2.1.0":
                return self._error(rec, 422, "Validation Failed: not a SARIF 2.1.0 log")
            repo.sarifs.append({"commit_sha": b["commit_sha"], "ref": b["ref"], "log": log})
            return 202, {"id": f"sarif-{len(repo.sarifs)}", "url": "https://github.example/sarif"}
        m = re.fullmatch(r"/pulls/(\d+)/comments", tail)
        if m and rec.method == "GET" and int(m.group(1)) in repo.pulls:
            return 200, self._page(rec, [self._review_json(c) for c in repo.review_comments.values()
                                         if c["pull"] == int(m.group(1))])
        m = re.fullmatch(r"/pulls/(\d+)/reviews/(\d+)/comments", tail)
        if m and rec.method == "GET" and int(m.group(1)) in repo.pulls:
            return 200, self._page(rec, [self._review_json(c) for c in repo.review_comments.values()
                                         if c["pull"] == int(m.group(1))
                                         and c["pull_request_review_id"] == int(m.group(2))])
        m = re.fullmatch(r"/pulls/(\d+)/comments/(\d+)/replies", tail)
        if m and rec.method == "POST" and int(m.group(1)) in repo.pulls:
            first = repo.review_comments.get(int(m.group(2)))
            b = rec.body
            if first is None or first["pull"] != int(m.group(1)):
                return self._error(rec, 404, "Not Found")
            if "in_reply_to_id" in first:  # GitHub: "replies to replies are not supported"
                return self._error(rec, 422, "Validation Failed: in_reply_to cannot be a reply")
            if not isinstance(b, dict) or not isinstance(b.get("body"), str) or not b["body"]:
                return self._error(rec, 422, "Validation Failed: body is required")
            made = self._new_review_comment(repo, first["pull"], "ferry-bot", b["body"], path=first["path"],
                                            line=first["line"], commit_id=first["commit_id"], in_reply_to=first["id"],
                                            review_id=None)
            return 201, made
        m = re.fullmatch(r"/issues/(\d+)/comments", tail)
        if m and rec.method == "GET":
            return 200, self._page(rec, repo.comments.get(int(m.group(1)), []))
        if m and rec.method == "POST":
            b = rec.body
            if not isinstance(b, dict) or not isinstance(b.get("body"), str) or not b["body"]:
                return self._error(rec, 422, "Validation Failed: body is required")
            thread = repo.comments.setdefault(int(m.group(1)), [])
            cid = sum(len(v) for v in repo.comments.values()) + 1
            thread.append({"id": cid, "body": b["body"], "user": {"login": "ferry-bot"}})
            return 201, {"id": cid, "html_url": f"https://github.example/c/{cid}", "body": b["body"],
                         "user": {"login": "ferry-bot"}}
        return self._error(rec, 404, "Not Found")

    @staticmethod
    def _review_json(c: dict[str, Any]) -> dict[str, Any]:
        return {k: v for k, v in c.items() if k != "pull"}

    @staticmethod
    def _page(rec: Recorded, items: list[Any]) -> list[Any]:
        per = int(rec.query.get("per_page", ["30"])[0])
        page = int(rec.query.get("page", ["1"])[0])
        return items[(page - 1) * per: page * per]

    # --- checks and GraphQL ---------------------------------------------------------------------

    @staticmethod
    def _output_problem(output: Any) -> str | None:
        if not isinstance(output, dict) or not all(isinstance(output.get(k), str) and output[k]
                                                   for k in ("title", "summary")):
            return "output needs a title and a summary"
        annotations = output.get("annotations", [])
        if not isinstance(annotations, list) or len(annotations) > 50:
            return "at most 50 annotations per request"
        for a in annotations:
            if not isinstance(a, dict) or not isinstance(a.get("path"), str) or a["path"].startswith("/") or \
                    not isinstance(a.get("start_line"), int) or not isinstance(a.get("end_line"), int) or \
                    a.get("annotation_level") not in ("notice", "warning", "failure") or \
                    not isinstance(a.get("message"), str) or not a["message"]:
                return f"annotation {a!r} is not valid"
        return None

    def _check_json(self, repo: Repo, cid: int) -> dict[str, Any]:
        run = repo.check_runs[cid]
        return {"id": cid, "name": run["name"], "head_sha": run["head_sha"], "status": run["status"],
                "conclusion": run["conclusion"], "html_url": f"https://github.example/{repo.full_name}/runs/{cid}"}

    def _commit_exists(self, repo: Repo, sha: str) -> bool:
        if repo.bare is None:
            return True
        return subprocess.run(["git", "--git-dir", str(repo.bare), "cat-file", "-e", f"{sha}^{{commit}}"],
                              capture_output=True).returncode == 0

    def _create_check(self, rec: Recorded, repo: Repo) -> tuple[int, Any]:
        b = rec.body
        if not isinstance(b, dict) or not isinstance(b.get("name"), str) or \
                not re.fullmatch(r"[0-9a-f]{40}", str(b.get("head_sha"))):
            return self._error(rec, 422, "Validation Failed: name and head_sha are required")
        if not self._commit_exists(repo, b["head_sha"]):
            return self._error(rec, 422, f"Validation Failed: No commit found for SHA: {b['head_sha']}")
        if b.get("status") == "completed" and b.get("conclusion") not in (
                "success", "failure", "neutral", "cancelled", "skipped", "timed_out", "action_required"):
            return self._error(rec, 422, "Validation Failed: a completed check run needs a conclusion")
        problem = self._output_problem(b.get("output"))
        if problem:
            return self._error(rec, 422, f"Validation Failed: {problem}")
        cid = sum(len(r.check_runs) for r in self.repos.values()) + 1
        repo.check_runs[cid] = {"name": b["name"], "head_sha": b["head_sha"], "status": b.get("status", "queued"),
                                "conclusion": b.get("conclusion"),
                                "output": {k: v for k, v in b["output"].items() if k != "annotations"},
                                "annotations": list(b["output"].get("annotations", []))}
        return 201, self._check_json(repo, cid)

    def _graphql(self, rec: Recorded) -> tuple[int, Any]:
        b = rec.body
        query = b.get("query") if isinstance(b, dict) else None
        variables = (b.get("variables") or {}) if isinstance(b, dict) else {}
        node = variables.get("id")
        if isinstance(query, str) and "reviewThreads" in query:
            return self._threads(rec, variables)
        if isinstance(query, str) and "resolveReviewThread" in query:
            for repo in self.repos.values():
                for first in repo.review_comments:
                    if node == f"PRRT_{first}":
                        repo.resolved.add(first)
                        return 200, {"data": {"resolveReviewThread": {"thread": {"id": node, "isResolved": True}}}}
            self.errors.append(f"POST /graphql: no review thread {node!r}")
            return 200, {"errors": [{"message": f"Could not resolve to a node with the global id of '{node}'"}]}
        if not isinstance(query, str) or "markPullRequestReadyForReview" not in query:
            return self._error(rec, 400, "only markPullRequestReadyForReview, reviewThreads and "
                                         "resolveReviewThread are faked")
        for repo in self.repos.values():
            for n, p in repo.pulls.items():
                if node == f"PR_{repo.full_name}#{n}":
                    p["draft"] = False
                    return 200, {"data": {"markPullRequestReadyForReview": {"pullRequest": {"isDraft": False}}}}
        self.errors.append(f"POST /graphql: no pull request {node!r}")
        return 200, {"errors": [{"message": f"Could not resolve to a node with the global id of '{node}'"}]}

    def _threads(self, rec: Recorded, variables: dict[str, Any]) -> tuple[int, Any]:
        """``repository(owner, name) { pullRequest(number) { reviewThreads(first, after) ... } }``: a page of
        threads (first: 100 at most), each with its first comment's ``databaseId``."""
        repo = self.repos.get(f"{variables.get('owner')}/{variables.get('name')}")
        number = variables.get("number")
        if repo is None or not isinstance(number, int) or number not in repo.pulls:
            return 200, {"data": {"repository": None}, "errors": [{"type": "NOT_FOUND", "message": "no such pull"}]}
        firsts = [c for c in repo.review_comments.values() if c["pull"] == number and "in_reply_to_id" not in c]
        start = int(variables.get("cursor") or 0)
        page = firsts[start:start + 100]
        nodes = [{"id": f"PRRT_{c['id']}", "isResolved": c["id"] in repo.resolved,
                  "comments": {"nodes": [{"databaseId": c["id"]}]}} for c in page]
        more = start + 100 < len(firsts)
        return 200, {"data": {"repository": {"pullRequest": {"reviewThreads": {
            "pageInfo": {"hasNextPage": more, "endCursor": str(start + 100) if more else None}, "nodes": nodes}}}}}
