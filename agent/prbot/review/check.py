"""The verdict of a review's revert commit, as the check run a ``/ferry migrate`` job leaves
(``agent.prbot.checks``): never ``migrated``, since parity is not checked again for a revert (``migrated``
means the work ran on the device, the tests passed and parity passed); ``partial`` with what its run and
test commands did on tpx, the reverted site as a notice at its line on the new head, and the head's scan
findings (what no rule fixes) as warnings."""

from __future__ import annotations

from pathlib import Path

from agent.chat.diffs import hunks_of
from agent.prbot.pr import gitops
from agent.prbot.pr.findings import scan_findings
from agent.prbot.pr.models import CommitInfo, Finding, PrResult

PARITY = "not checked again for this commit (a review's revert: its run and test commands ran on tpx)"


def revert_result(clone: Path, *, before: str, head: str, branch: str, base: str, rules: list[str], path: str,
                  ok: bool, runs: str) -> PrResult:
    """``head`` (the revert, on ``before``) of ``clone`` as a result to check: ``partial`` whatever its runs
    did, as parity was not shown for it; ``ok``: its runs passed (the summary says so); ``runs``: what ran,
    in words."""
    from tools.scan.api import scan
    from tools.scan.models import ScanRequest

    diff = gitops.git(clone, "diff", "--no-color", "--no-ext-diff", "-U0", before, head, "--", path, strip=False)
    lines = [n for h in hunks_of(diff) for n in h.changed_new] or [h.new_start for h in hunks_of(diff)]
    what = ", ".join(rules)
    notes = [Finding(path=path, line=max(lines[0], 1), level="notice", title=f"{what} reverted in review",
                     message=f"Ferry's change here ({what}) was undone at this line only, as a review asked; the "
                             "rule's other sites stay migrated.")] if lines else []
    subject = gitops.git(clone, "log", "-1", "--format=%s", head)
    return PrResult(
        migration_id=f"review-{head[:12]}", status="partial",
        summary=(f"{what} reverted at {path} as asked in review; {runs}; "
                 + ("parity not checked again for this commit: run `/ferry try again` for a full verdict" if ok
                    else "the runs did not pass")), base=base, base_sha=before,
        branch=branch, head=head, commits=[CommitInfo(sha=head, subject=subject, files=[path])], title=subject,
        body="", out_dir="", pr_text="", parity=PARITY,
        findings=notes + scan_findings(scan(ScanRequest(path=clone, jobs=1))))
