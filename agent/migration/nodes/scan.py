"""scan: find the CUDA idioms in the original code."""

from __future__ import annotations

from collections import Counter

from agent.migration import adapters
from agent.migration.nodes.common import SUMMARY, Update, source_of, step
from agent.migration.records import ReviewItem, ScanDigest
from agent.migration.runs import RunScheduler
from agent.migration.state import MigrationState, dump, scanned
from tools.scan.models import ScanReport


@step("scan")
def scan(state: MigrationState, runs: RunScheduler) -> Update:
    if scanned(state):
        return {SUMMARY: "already done"}
    digest = digest_of(adapters.scan(source_of(state)))
    return {"scan": dump(digest),
            SUMMARY: ", ".join(f"{n} {c}" for c, n in sorted(digest.counts.items())) or "no CUDA idioms found"}


def digest_of(report: ScanReport) -> ScanDigest:
    """The scan report as the migration keeps it: every finding, and the counts by category."""
    items = [ReviewItem(rule=f.rule_id, file=f.file, line=f.line, category=f.category,
                        message=f.message or f.reason or f.rewrite or "") for f in report.findings]
    return ScanDigest(counts=dict(Counter(i.category for i in items)), findings=items)
