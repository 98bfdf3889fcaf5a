"""A typed GitHub REST client (httpx): a token or GitHub App credentials, responses validated by models.

GETs are retried once on 502/503/504 and connection errors; nothing that writes is retried. Error
messages carry GitHub's own ``message`` and never a token.
"""

from __future__ import annotations

import logging
import re
import threading
import time
from datetime import datetime
from types import TracebackType
from typing import Any, TypeVar
from urllib.parse import quote

import httpx
from pydantic import BaseModel, ValidationError

from agent.prbot.github.config import GitHubConfig
from agent.prbot.github.models import (
    AccessToken,
    CheckRun,
    IssueComment,
    OrgRepository,
    Permission,
    PermissionAnswer,
    PullRequest,
    Repository,
    ReviewComment,
)

logger = logging.getLogger(__name__)
M = TypeVar("M", bound=BaseModel)
RETRY = frozenset({502, 503, 504})


class GitHubError(Exception):
    def __init__(self, message: str, *, status: int | None = None, method: str = "", path: str = "",
                 retry_at: float | None = None) -> None:
        super().__init__(f"GitHub {method} {path}: {message}" if method else message)
        self.status, self.method, self.path = status, method, path
        self.retry_at = retry_at  # rate limited: when (epoch seconds) GitHub takes requests again; else None


def retry_at(status: int, headers: httpx.Headers, now: float | None = None, message: str = "") -> float | None:
    """When a 403/429 answer that is a rate limit lets requests in again (epoch seconds): ``retry-after``
    (seconds) wins, then ``x-ratelimit-reset`` when ``x-ratelimit-remaining`` is 0; a limit that names
    neither (a 429, or a 403 whose message says "rate limit": GitHub's secondary limits) is a minute, as
    GitHub's documentation asks. None: not a rate limit (a 403 for permissions)."""
    if status not in (403, 429):
        return None
    if status == 403 and "rate limit" in message.lower():
        status = 429  # a secondary limit: waited on like a 429
    now = time.time() if now is None else now
    after, remaining, reset = (headers.get(k) for k in ("retry-after", "x-ratelimit-remaining", "x-ratelimit-reset"))
    try:
        if after is not None:
            return now + max(0.0, float(after))
        if remaining == "0" and reset is not None:
            return max(now, float(reset))
    except ValueError:
        return now + 60.0
    return now + 60.0 if status == 429 else None


class RateLimit(BaseModel):
    """GitHub's rate-limit headers of the last answer: requests left in the window, and when it resets."""

    remaining: int
    reset: float


def _seg(text: str) -> str:
    return quote(text, safe="")


class GitHubClient:
    def __init__(self, config: GitHubConfig, *, transport: httpx.BaseTransport | None = None) -> None:
        self.config = config
        self._http = httpx.Client(base_url=config.api_url, timeout=config.timeout_s, transport=transport,
                                  headers={"Accept": "application/vnd.github+json", "User-Agent": config.user_agent,
                                           "X-GitHub-Api-Version": "2022-11-28"})
        self._lock = threading.Lock()
        self._installation_tokens: dict[int, tuple[str, float]] = {}
        self._installations: dict[str, int] = {}
        self.rate: RateLimit | None = None  # the last answer's rate-limit headers (None: none seen yet)

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> GitHubClient:
        return self

    def __exit__(self, et: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None) -> None:
        self.close()

    # --- credentials ----------------------------------------------------------------------------

    def _app_jwt(self) -> str:
        import jwt  # PyJWT (with cryptography for RS256)

        now = int(time.time())
        assert self.config.private_key is not None and self.config.app_id is not None
        return jwt.encode({"iat": now - 60, "exp": now + 540, "iss": str(self.config.app_id)},
                          self.config.private_key.get_secret_value(), algorithm="RS256")

    def _installation_id(self, owner: str, repo: str) -> int:
        if self.config.installation_id is not None:
            return self.config.installation_id
        key = f"{owner}/{repo}"
        if key not in self._installations:
            where = f"/repos/{_seg(owner)}/{_seg(repo)}" if repo else f"/orgs/{_seg(owner)}"  # "": the organisation's
            data = self._send("GET", f"{where}/installation", auth=f"Bearer {self._app_jwt()}")
            try:
                self._installations[key] = int(data["id"])
            except (KeyError, TypeError, ValueError):
                raise GitHubError("the installation answer has no id", method="GET", path="installation") from None
        return self._installations[key]

    def git_token(self, owner: str, repo: str) -> str | None:
        """The token for git and the API: the configured one, or an installation token (cached until 5
        minutes before it expires)."""
        if self.config.token is not None:
            return self.config.token.get_secret_value()
        if self.config.app_id is None:
            return None
        with self._lock:
            inst = self._installation_id(owner, repo)
            cached = self._installation_tokens.get(inst)
            if cached and cached[1] - time.time() > 300:
                return cached[0]
            data = self._send("POST", f"/app/installations/{inst}/access_tokens", auth=f"Bearer {self._app_jwt()}")
            answer = self._model(AccessToken, data, "POST", "access_tokens")
            expires = datetime.fromisoformat(answer.expires_at.replace("Z", "+00:00")).timestamp()
            self._installation_tokens[inst] = (answer.token, expires)
            return answer.token

    # --- the requests ---------------------------------------------------------------------------

    def _send(self, method: str, path: str, *, auth: str, json: Any = None,
              params: dict[str, str] | None = None, allow_404: bool = False) -> Any:
        return self._exchange(method, path, auth=auth, json=json, params=params, allow_404=allow_404)[0]

    def _exchange(self, method: str, path: str, *, auth: str, json: Any = None,
                  params: dict[str, str] | None = None, allow_404: bool = False) -> tuple[Any, httpx.Headers]:
        """The answer's JSON (None: empty, or a 404 where allowed) and its headers."""
        tries = 2 if method == "GET" else 1
        for attempt in range(tries):
            try:
                resp = self._http.request(method, path, json=json, params=params, headers={"Authorization": auth})
            except httpx.TransportError as exc:
                if attempt + 1 < tries:
                    continue
                raise GitHubError(f"cannot reach {self.config.api_url}: {type(exc).__name__}", method=method,
                                  path=path) from None
            if resp.status_code in RETRY and attempt + 1 < tries:
                continue
            break
        self._note_rate(resp.headers)
        if allow_404 and resp.status_code == 404:
            return None, resp.headers
        if resp.status_code >= 400:
            raise GitHubError(self._why(resp), status=resp.status_code, method=method, path=path,
                              retry_at=retry_at(resp.status_code, resp.headers, message=self._message(resp)))
        if resp.status_code == 204 or not resp.content:
            return None, resp.headers
        try:
            return resp.json(), resp.headers
        except ValueError:
            raise GitHubError("the answer is not JSON", status=resp.status_code, method=method, path=path) from None

    def _note_rate(self, headers: httpx.Headers) -> None:
        try:
            remaining, reset = headers.get("x-ratelimit-remaining"), headers.get("x-ratelimit-reset")
            if remaining is not None and reset is not None:
                self.rate = RateLimit(remaining=int(remaining), reset=float(reset))
        except ValueError:  # headers that are not numbers: as if there were none
            pass

    @staticmethod
    def _message(resp: httpx.Response) -> str:
        """GitHub's own ``message`` of an error answer ("" when it has none)."""
        try:
            return str(resp.json().get("message", ""))[:300]
        except (ValueError, AttributeError):
            return ""

    @classmethod
    def _why(cls, resp: httpx.Response) -> str:
        message = cls._message(resp)
        text = f"{resp.status_code} {message or resp.reason_phrase}"
        if resp.status_code in (403, 429) and (resp.headers.get("retry-after") or
                                               resp.headers.get("x-ratelimit-remaining") == "0"):
            when = resp.headers.get("retry-after")
            reset = resp.headers.get("x-ratelimit-reset")
            text += f" (rate limited: retry after {when} s)" if when else f" (rate limited until {reset})"
        return text

    @staticmethod
    def _model(model: type[M], data: Any, method: str, path: str) -> M:
        try:
            return model.model_validate(data)
        except ValidationError as exc:
            raise GitHubError(f"the answer is not a {model.__name__}: {exc.errors()[0]['msg']}", method=method,
                              path=path) from None

    def _api(self, method: str, owner: str, repo: str, tail: str, model: type[M] | None = None, **kw: Any) -> Any:
        token = self.git_token(owner, repo)
        if token is None:
            raise GitHubError("no GitHub credentials are configured")
        path = f"/repos/{_seg(owner)}/{_seg(repo)}{tail}"
        data = self._send(method, path, auth=f"Bearer {token}", **kw)
        return data if model is None or data is None else self._model(model, data, method, path)

    def org_repos(self, org: str, per_page: int = 100) -> list[OrgRepository]:
        """All of an organisation's repositories the credentials see, page by page (GitHub's ``Link: <...>;
        rel="next"``), in GitHub's order."""
        token = self.git_token(org, "")
        if token is None:
            raise GitHubError("no GitHub credentials are configured")
        path = f"/orgs/{_seg(org)}/repos"
        params: dict[str, str] | None = {"type": "all", "per_page": str(per_page), "sort": "full_name"}
        repos: list[OrgRepository] = []
        url = path
        for _ in range(1000):  # 100 000 repositories: a Link that never ends is not followed for ever
            data, headers = self._exchange("GET", url, auth=f"Bearer {token}", params=params)
            if not isinstance(data, list):
                raise GitHubError("the repository list is not a list", method="GET", path=path)
            repos += [self._model(OrgRepository, r, "GET", path) for r in data]
            following = next_link(headers.get("link"), self.config.api_url)
            if following is None:
                return repos
            url, params = following, None  # the next page's URL carries its own query
        raise GitHubError("the repository list has more than 1000 pages", method="GET", path=path)

    def permission(self, owner: str, repo: str, user: str) -> Permission:
        answer = self._api("GET", owner, repo, f"/collaborators/{_seg(user)}/permission", PermissionAnswer,
                           allow_404=True)
        return "none" if answer is None else answer.permission

    def repository(self, owner: str, repo: str) -> Repository:
        return self._api("GET", owner, repo, "", Repository)  # type: ignore[no-any-return]

    def pull(self, owner: str, repo: str, number: int) -> PullRequest:
        return self._api("GET", owner, repo, f"/pulls/{number}", PullRequest)  # type: ignore[no-any-return]

    def find_pull(self, owner: str, repo: str, head_branch: str, base: str | None = None) -> PullRequest | None:
        params = {"head": f"{owner}:{head_branch}", "state": "open", **({"base": base} if base else {})}
        data = self._api("GET", owner, repo, "/pulls", params=params)
        if not isinstance(data, list):
            raise GitHubError("the pull request list is not a list", method="GET", path="/pulls")
        pulls = [self._model(PullRequest, p, "GET", "/pulls") for p in data]
        return next((p for p in pulls if p.head.ref == head_branch), None)

    def open_pull(self, owner: str, repo: str, *, head: str, base: str, title: str, body: str,
                  draft: bool = False) -> PullRequest:
        return self._api("POST", owner, repo, "/pulls", PullRequest,  # type: ignore[no-any-return]
                         json={"title": title, "head": head, "base": base, "body": body,
                               "maintainer_can_modify": True, "draft": draft})

    def update_pull(self, owner: str, repo: str, number: int, *, title: str, body: str) -> PullRequest:
        return self._api("PATCH", owner, repo, f"/pulls/{number}", PullRequest,  # type: ignore[no-any-return]
                         json={"title": title, "body": body})

    def comment(self, owner: str, repo: str, number: int, body: str) -> IssueComment:
        return self._api("POST", owner, repo, f"/issues/{number}/comments", IssueComment,  # type: ignore[no-any-return]
                         json={"body": body})

    def issue_comments(self, owner: str, repo: str, number: int) -> list[IssueComment]:
        """The conversation's comments of an issue or pull request, oldest first (1000 at most)."""
        tail = f"/issues/{number}/comments"
        out: list[IssueComment] = []
        for page in range(1, 11):
            data = self._api("GET", owner, repo, tail, params={"per_page": "100", "page": str(page)})
            if not isinstance(data, list):
                raise GitHubError("the comment list is not a list", method="GET", path=tail)
            out += [self._model(IssueComment, c, "GET", tail) for c in data]
            if len(data) < 100:
                break
        return out

    def request_reviewers(self, owner: str, repo: str, number: int, reviewers: list[str]) -> None:
        self._api("POST", owner, repo, f"/pulls/{number}/requested_reviewers", json={"reviewers": reviewers})

    def mark_ready(self, owner: str, repo: str, pull: PullRequest) -> None:
        """A draft pull request made ready for review: GitHub's REST API cannot, its GraphQL API can."""
        if not pull.node_id:
            raise GitHubError("the pull request has no node_id", method="POST", path="/graphql")
        self.graphql(owner, repo, READY, {"id": pull.node_id})

    def graphql(self, owner: str, repo: str, query: str, variables: dict[str, Any]) -> dict[str, Any]:
        """A GraphQL call with the repository's token: its ``data`` (GitHubError on ``errors``)."""
        token = self.git_token(owner, repo)
        if token is None:
            raise GitHubError("no GitHub credentials are configured")
        data = self._send("POST", graphql_url(self.config.api_url), auth=f"Bearer {token}",
                          json={"query": query, "variables": variables})
        if not isinstance(data, dict) or data.get("errors") or not isinstance(data.get("data"), dict):
            errors = data.get("errors") if isinstance(data, dict) else None
            message = str(errors[0].get("message", "")) if isinstance(errors, list) and errors and \
                isinstance(errors[0], dict) else "no data"
            raise GitHubError(f"GraphQL: {message[:300]}", method="POST", path="/graphql")
        answer: dict[str, Any] = data["data"]
        return answer

    # --- review threads -------------------------------------------------------------------------

    def _review_list(self, owner: str, repo: str, tail: str) -> list[ReviewComment]:
        out: list[ReviewComment] = []
        for page in range(1, 11):  # 1000 comments at most
            data = self._api("GET", owner, repo, tail, params={"per_page": "100", "page": str(page)})
            if not isinstance(data, list):
                raise GitHubError("the review comment list is not a list", method="GET", path=tail)
            out += [self._model(ReviewComment, c, "GET", tail) for c in data]
            if len(data) < 100:
                break
        return out

    def review_comments(self, owner: str, repo: str, number: int) -> list[ReviewComment]:
        """Every review comment of a pull request, oldest first."""
        return self._review_list(owner, repo, f"/pulls/{number}/comments")

    def comments_of_review(self, owner: str, repo: str, number: int, review_id: int) -> list[ReviewComment]:
        return self._review_list(owner, repo, f"/pulls/{number}/reviews/{review_id}/comments")

    def reply_in_thread(self, owner: str, repo: str, number: int, thread_id: int, body: str) -> ReviewComment:
        """A reply in a review thread (``thread_id``: its first comment; GitHub takes no reply to a reply)."""
        return self._api("POST", owner, repo,  # type: ignore[no-any-return]
                         f"/pulls/{number}/comments/{thread_id}/replies", ReviewComment, json={"body": body})

    def resolve_thread(self, owner: str, repo: str, number: int, thread_id: int) -> bool:
        """Resolve the review thread whose first comment is ``thread_id`` (GraphQL: REST cannot); False when
        no thread of the pull request starts with it."""
        cursor: str | None = None
        for _ in range(20):
            data = self.graphql(owner, repo, THREADS, {"owner": owner, "name": repo, "number": number,
                                                       "cursor": cursor})
            threads = (((data.get("repository") or {}).get("pullRequest") or {}).get("reviewThreads") or {})
            for node in threads.get("nodes") or []:
                first = ((node.get("comments") or {}).get("nodes") or [{}])[0]
                if first.get("databaseId") == thread_id:
                    if not node.get("isResolved"):
                        self.graphql(owner, repo, RESOLVE, {"id": node["id"]})
                    return True
            page = threads.get("pageInfo") or {}
            if not page.get("hasNextPage"):
                return False
            cursor = page.get("endCursor")
        return False

    def create_check_run(self, owner: str, repo: str, body: dict[str, Any]) -> CheckRun:
        return self._api("POST", owner, repo, "/check-runs", CheckRun, json=body)  # type: ignore[no-any-return]

    def update_check_run(self, owner: str, repo: str, run_id: int, body: dict[str, Any]) -> CheckRun:
        return self._api("PATCH", owner, repo, f"/check-runs/{run_id}", CheckRun,  # type: ignore[no-any-return]
                         json=body)

    def upload_sarif(self, owner: str, repo: str, *, commit_sha: str, ref: str, sarif: bytes) -> None:
        """A SARIF log to code scanning (gzip, then base64, as GitHub takes it)."""
        import base64
        import gzip

        data = base64.b64encode(gzip.compress(sarif)).decode()
        self._api("POST", owner, repo, "/code-scanning/sarifs",
                  json={"commit_sha": commit_sha, "ref": ref, "sarif": data, "tool_name": "ferry-scan"})


THREADS = ("query($owner: String!, $name: String!, $number: Int!, $cursor: String) { repository(owner: $owner, "
           "name: $name) { pullRequest(number: $number) { reviewThreads(first: 100, after: $cursor) { pageInfo "
           "{ hasNextPage endCursor } nodes { id isResolved comments(first: 1) { nodes { databaseId } } } } } } }")
RESOLVE = "mutation($id: ID!) { resolveReviewThread(input: {threadId: $id}) { thread { id isResolved } } }"
READY = ("mutation($id: ID!) { markPullRequestReadyForReview(input: {pullRequestId: $id}) "
         "{ pullRequest { isDraft } } }")


def graphql_url(api_url: str) -> str:
    """GitHub's GraphQL endpoint beside its REST one: ``https://api.github.com/graphql``, and on GitHub
    Enterprise Server ``https://HOST/api/graphql`` (its REST API is ``https://HOST/api/v3``)."""
    base = api_url.rstrip("/")
    return base.removesuffix("/v3") + "/graphql" if base.endswith("/api/v3") else base + "/graphql"


_LINK = re.compile(r'<([^>]+)>\s*;\s*rel="([^"]+)"')


def next_link(header: str | None, api_url: str) -> str | None:
    """The ``rel="next"`` URL of a ``Link`` header, as a path under ``api_url`` (None: no next page, or a
    next page on another host, which is not followed with Ferry's credentials)."""
    links: list[tuple[str, str]] = _LINK.findall(header or "")
    for url, rel in links:
        if "next" in rel.split():
            base = api_url.rstrip("/")
            if url.startswith(base + "/"):
                return url[len(base):]
            return None
    return None
