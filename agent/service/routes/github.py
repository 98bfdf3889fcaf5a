"""``POST /v1/github/webhook``: GitHub's deliveries, authenticated by their HMAC (not the service's tokens);
``GET /v1/github/jobs[/{delivery}]``: what the deliveries started, for any holder of a service token.

Thin: the signature and the payload are checked (``agent.prbot.github.webhook``), the job is queued
(``agent.prbot.jobs``) and 202 answered at once; the work and its comments happen after.
"""

from __future__ import annotations

import json
import logging
from typing import Annotated

from fastapi import APIRouter, Depends, Header, HTTPException, Query, Request, status
from fastapi.concurrency import run_in_threadpool
from pydantic import BaseModel

from agent.ids import ID_RULE, id_problem
from agent.prbot.github.webhook import Ignored, payload_key, trigger_of, verify_signature
from agent.prbot.jobs import GitHubJobs
from agent.prbot.store import JobState, JobView
from agent.service.deps import OwnerDep

logger = logging.getLogger(__name__)
router = APIRouter(prefix="/v1/github", tags=["github"])


class JobList(BaseModel):
    items: list[JobView]
    total: int
    limit: int
    offset: int


def _not_configured() -> HTTPException:
    return HTTPException(status.HTTP_503_SERVICE_UNAVAILABLE,
                         "GitHub is not configured on this server: set FERRY_GITHUB_WEBHOOK_SECRET and "
                         "FERRY_GITHUB_TOKEN (or a GitHub App's credentials) and restart ferry serve")


def configured_jobs(request: Request) -> GitHubJobs:
    """The server's GitHub jobs (they exist exactly when GitHub is configured); 503 otherwise."""
    jobs: GitHubJobs | None = getattr(request.app.state, "github_jobs", None)
    if jobs is None:
        raise _not_configured()
    return jobs


def get_jobs(request: Request, _owner: OwnerDep) -> GitHubJobs:
    return configured_jobs(request)  # the caller's token first: 401 before 503


JobsDep = Annotated[GitHubJobs, Depends(get_jobs)]


class WebhookAnswer(BaseModel):
    accepted: bool
    delivery: str
    duplicate: bool = False
    reason: str | None = None


@router.post("/webhook", status_code=status.HTTP_202_ACCEPTED, response_model=WebhookAnswer,
             responses={401: {"description": "the signature is missing or wrong"},
                        503: {"description": "GitHub is not configured on this server"}})
async def webhook(request: Request,
                  x_github_event: Annotated[str | None, Header()] = None,
                  x_github_delivery: Annotated[str | None, Header()] = None,
                  x_hub_signature_256: Annotated[str | None, Header()] = None) -> WebhookAnswer:
    """A GitHub delivery: an issue or PR comment ``/ferry migrate [--run "..."] [--test "..."]``, the
    configured label on a pull request, or a review comment (or review) on a Ferry pull request (a
    follow-up: ``agent.prbot.review``). Verified by ``X-Hub-Signature-256``; answered 202 at once."""
    jobs = configured_jobs(request)
    config = jobs.config
    body = await request.body()
    if not x_hub_signature_256:
        raise HTTPException(status.HTTP_401_UNAUTHORIZED, "X-Hub-Signature-256 is missing: set the webhook's secret")
    if not verify_signature(config.webhook_secret.get_secret_value().encode(), body, x_hub_signature_256):
        raise HTTPException(status.HTTP_401_UNAUTHORIZED,
                            "X-Hub-Signature-256 does not match the body: the webhook's secret differs from "
                            "FERRY_GITHUB_WEBHOOK_SECRET")
    if not x_github_event or not x_github_delivery:
        raise HTTPException(status.HTTP_400_BAD_REQUEST, "X-GitHub-Event and X-GitHub-Delivery are required")
    problem = id_problem(x_github_delivery)  # it names the job and its directory: a plain name (GitHub's: a UUID)
    if problem is not None:
        raise HTTPException(status.HTTP_400_BAD_REQUEST, f"X-GitHub-Delivery is not a plain name ({problem}); "
                                                         f"GitHub sends a UUID. {ID_RULE}")
    if x_github_event == "ping":
        return WebhookAnswer(accepted=False, delivery=x_github_delivery, reason="pong")
    try:
        payload = json.loads(body)
    except (ValueError, RecursionError):  # not JSON, not UTF-8, a 5,000-digit number, nesting too deep
        raise HTTPException(status.HTTP_400_BAD_REQUEST, "the body is not JSON (set the webhook's content type "
                                                         "to application/json)") from None
    if not isinstance(payload, dict):
        raise HTTPException(status.HTTP_400_BAD_REQUEST, "the body is not a JSON object")
    trigger = trigger_of(x_github_event, x_github_delivery, payload, config)
    if isinstance(trigger, Ignored):  # 2xx: GitHub lists a non-2xx answer as a failed delivery
        return WebhookAnswer(accepted=False, delivery=x_github_delivery, reason=trigger.reason)
    # one job per signed event: the delivery header is not signed, so a replay under a new one is the same key
    # (a review comment's key is its id already: its own event and the review that holds it are one job)
    if trigger.payload_key is None:
        trigger = trigger.model_copy(update={"payload_key": payload_key(x_github_event, body)})
    new = await run_in_threadpool(jobs.submit, trigger)  # may comment "queued behind": not on the loop
    logger.info("github delivery %s for %s#%d: %s", x_github_delivery, trigger.full_name, trigger.number,
                "queued" if new else "a redelivery or replay, ignored")
    return WebhookAnswer(accepted=new, delivery=x_github_delivery, duplicate=not new,
                         reason=None if new else "ignored: replay: this event (its signed body) was received "
                                                 "before; it started one job")


@router.get("/jobs", response_model=JobList, responses={503: {"description": "GitHub is not configured"}})
def list_jobs(jobs: JobsDep, repo: Annotated[str | None, Query(max_length=200, description="owner/name")] = None,
              state: Annotated[JobState | None, Query()] = None,
              limit: Annotated[int, Query(ge=1, le=200)] = 50,
              offset: Annotated[int, Query(ge=0, le=10**9)] = 0) -> JobList:
    """The jobs GitHub's deliveries started, newest first: queued, running (which attempt), done or failed
    (with the comment that said so)."""
    total, items = jobs.store.views(repo=repo, state=state, limit=limit, offset=offset)
    return JobList(items=items, total=total, limit=limit, offset=offset)


@router.get("/jobs/{delivery}", response_model=JobView,
            responses={404: {"description": "no job for this delivery"}, 503: {"description": "not configured"}})
def get_job(delivery: str, jobs: JobsDep) -> JobView:
    found = jobs.store.view(delivery) if id_problem(delivery) is None else None
    if found is None:
        raise HTTPException(status.HTTP_404_NOT_FOUND, f"no GitHub job for delivery {delivery!r} (GET /v1/github/jobs "
                                                       "lists them)")
    return found


@router.delete("/jobs/{delivery}", status_code=status.HTTP_202_ACCEPTED, response_model=JobView,
               responses={404: {"description": "no job for this delivery"},
                          409: {"description": "the job has already ended"}, 503: {"description": "not configured"}})
def cancel_job(delivery: str, jobs: JobsDep) -> JobView:
    """Cancel a job: a queued one ends ``cancelled`` at once; a running one stops at its next step, before
    anything is pushed (``cancel_requested`` until then; one already pushing ends as it would have)."""
    was = jobs.cancel(delivery) if id_problem(delivery) is None else None
    if was is None:
        raise HTTPException(status.HTTP_404_NOT_FOUND, f"no GitHub job for delivery {delivery!r}")
    if was not in ("queued", "running"):
        raise HTTPException(status.HTTP_409_CONFLICT, f"the job has already ended ({was}); nothing to cancel")
    found = jobs.store.view(delivery)
    assert found is not None
    return found
