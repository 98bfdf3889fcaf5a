"""The check run a GitHub job leaves on the commit it migrated: the verdict as its conclusion, the
status, summary and parity headline as its output, and the findings as annotations at their lines.

GitHub takes at most 50 annotations per request: the first 50 go with the check run's creation, the
rest in further updates of it (each update adds its annotations to the ones already there).
"""

from __future__ import annotations

import logging
from typing import Any, Literal

from agent.errors import Status
from agent.prbot.github.client import GitHubClient, GitHubError
from agent.prbot.pr.models import Finding, PrResult
from tools.textsafe import md_code, md_inline

logger = logging.getLogger(__name__)

CHECK_NAME = "Ferry migration"
ANNOTATIONS_PER_REQUEST = 50
MAX_ANNOTATIONS = 1000  # a check run's output past this helps no reviewer; the rest are counted in its summary
Conclusion = Literal["success", "neutral", "failure"]


def conclusion_of(status: Status) -> Conclusion:
    """migrated: success; a migration that went part of the way or needs a model or a person: neutral;
    a failure of the run, the budget, the sandbox or Ferry: failure."""
    if status == "migrated":
        return "success"
    if status.startswith("failed_"):
        return "failure"
    return "neutral"


def _annotation(f: Finding) -> dict[str, Any]:
    return {"path": f.path, "start_line": f.line, "end_line": f.line, "annotation_level": f.level,
            "title": f.title[:255], "message": f.message[:64000] or f.title[:255]}


def check_output(result: PrResult, base: str,
                 limit: int = MAX_ANNOTATIONS) -> tuple[dict[str, Any], list[list[dict[str, Any]]]]:
    """The check run's ``output`` (title and summary) and its annotations in batches of 50."""
    shown = result.findings[:limit]
    title = f"{result.status}: {result.summary or result.status}"[:255]
    lines = [f"Ferry's migration of {md_code(base)} ended **{md_inline(result.status)}**: "
             f"{md_inline(result.summary or '', keep_code=True)}", "",
             f"**Parity:** {md_inline(result.parity or 'not checked', keep_code=True)}", ""]
    reviews = sum(1 for f in result.findings if f.level == "warning")
    lines.append(f"**Findings:** {reviews} left for review, {len(result.findings) - reviews} from the profile"
                 + (f" ({len(shown)} annotated; the rest are in the pull request's text)"
                    if len(shown) < len(result.findings) else ""))
    if result.branch:
        lines += ["", f"Branch {md_code(result.branch)}, {len(result.commits)} commits."]
    output = {"title": title, "summary": "\n".join(lines)[:65000]}
    annotations = [_annotation(f) for f in shown]
    batches = [annotations[i:i + ANNOTATIONS_PER_REQUEST] for i in range(0, len(annotations), ANNOTATIONS_PER_REQUEST)]
    return output, batches


def check_requests(result: PrResult, base: str, head_sha: str) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """The body that creates the completed check run (with the first 50 annotations) and the bodies of
    the updates that add the rest."""
    output, batches = check_output(result, base)
    create = {"name": CHECK_NAME, "head_sha": head_sha, "status": "completed",
              "conclusion": conclusion_of(result.status),
              "output": {**output, **({"annotations": batches[0]} if batches else {})}}
    updates = [{"output": {**output, "annotations": batch}} for batch in batches[1:]]
    return create, updates


def quiet(text: str) -> str:
    """Run- or git-derived text that pings no one and links nowhere on GitHub: a zero-width space after each
    ``@`` (no mention, no team notification) and inside ``://`` and ``www.`` (no autolink)."""
    return text.replace("@", "@\u200b").replace("://", ":\u200b//").replace("www.", "www\u200b.")


def leave_check(client: GitHubClient, owner: str, repo: str, result: PrResult, base: str, head_sha: str) -> str:
    """The verdict as a check run on ``head_sha`` (annotations past 50 in further updates); returns what
    the answer on GitHub says of it. A check run GitHub refuses (a token, not an App) fails nothing."""
    create, updates = check_requests(result, base, head_sha)
    try:
        run = client.create_check_run(owner, repo, create)
        for update in updates:
            client.update_check_run(owner, repo, run.id, update)
    except GitHubError as exc:
        logger.warning("no check run on %s/%s@%s: %s", owner, repo, head_sha[:12], exc)
        return f"\n\nNo check run: GitHub answered {quiet(md_inline(str(exc.args[0])[:300]))}."
    where = f": {run.html_url}" if run.html_url else ""
    return f"\n\nThe verdict and the findings at their lines are in the check run {md_code(CHECK_NAME)}{where}."
