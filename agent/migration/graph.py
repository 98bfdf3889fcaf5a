"""The migration graph (LangGraph StateGraph): the nodes and the edges between them; nothing else.

Its edges as a drawing: docs/agent.md, generated from :func:`build_graph` by ``scripts/graph_doc.py``
(``edges.after_*`` decide each branch). It is driven by :mod:`agent.migration.driver`, behind the
façade (:mod:`agent.migration.facade`).

Under --llm the model is consulted wherever the rules stop: ``llm_fix`` after ``diagnose`` (a run
or test failure no rule fixes), after ``parity`` (a failure no rule explains) and after
``cpu_check`` (the guard rejected and reverted the model's own edit); ``llm_explain`` explains a
``failed_environment`` ending (no tools; the status stands). The model's profile round
(``agent.migration.nodes.profile_llm``) sends its edit the whole way again (apply_fix ... profile); while it is
verified, a failure goes to ``profile_revert`` instead of a fix (``edges.verifying_profile_change``).

``reference_run`` starts the original code's run in the background (``agent.migration.runs.RunScheduler``);
it goes on beside the scan, the rewrite and the first target run, and ``await_reference`` joins
it (a no-op once it is settled). The scheduler reaches the nodes through the graph's runtime
context (:class:`MigrationContext`). Checkpoints: ``agent.migration.checkpoints``.
"""

from __future__ import annotations

from dataclasses import dataclass

from langgraph.graph import END, START, StateGraph

from agent.migration import edges
from agent.migration.nodes.apply_fix import apply_fix
from agent.migration.nodes.approve_cost import approve_cost
from agent.migration.nodes.cpu_check import cpu_check
from agent.migration.nodes.diagnose import diagnose
from agent.migration.nodes.ingest import ingest
from agent.migration.nodes.llm_explain import llm_explain
from agent.migration.nodes.llm_fix import llm_fix
from agent.migration.nodes.parity import parity
from agent.migration.nodes.plan import plan
from agent.migration.nodes.profile import profile
from agent.migration.nodes.profile_llm import profile_llm, profile_revert, profile_verdict
from agent.migration.nodes.reference import await_reference, reference_run
from agent.migration.nodes.report import report
from agent.migration.nodes.rewrite import rewrite
from agent.migration.nodes.scan import scan
from agent.migration.nodes.target import target_run, tests
from agent.migration.runs import RunScheduler
from agent.migration.state import MigrationState


@dataclass
class MigrationContext:
    """What the nodes get beside the state: the process's run scheduler (never checkpointed)."""

    runs: RunScheduler


NODES = (
    ("ingest", ingest), ("reference_run", reference_run), ("scan", scan), ("plan", plan), ("rewrite", rewrite),
    ("target_run", target_run), ("await_reference", await_reference), ("diagnose", diagnose), ("llm_fix", llm_fix),
    ("apply_fix", apply_fix), ("parity", parity), ("tests", tests), ("cpu_check", cpu_check),
    ("profile", profile), ("profile_llm", profile_llm), ("profile_verdict", profile_verdict),
    ("profile_revert", profile_revert), ("llm_explain", llm_explain), ("report", report),
    ("approve_cost", approve_cost),
)


def build_graph() -> StateGraph[MigrationState, MigrationContext, MigrationState, MigrationState]:
    g: StateGraph[MigrationState, MigrationContext, MigrationState, MigrationState] = StateGraph(
        MigrationState, context_schema=MigrationContext)
    for name, fn in NODES:
        g.add_node(name, fn)  # type: ignore[call-overload]
    g.add_edge(START, "ingest")
    g.add_conditional_edges("ingest", edges.after_ingest)
    g.add_conditional_edges("reference_run", edges.after_reference)
    g.add_conditional_edges("scan", edges.after_step, {"next": "plan", "report": "report"})
    g.add_conditional_edges("plan", edges.after_step, {"next": "rewrite", "report": "report"})
    g.add_conditional_edges("rewrite", edges.after_step, {"next": "target_run", "report": "report"})
    g.add_edge("target_run", "await_reference")
    g.add_conditional_edges("await_reference", edges.after_target)
    g.add_conditional_edges("diagnose", edges.after_diagnose)
    g.add_conditional_edges("llm_fix", edges.after_llm)
    g.add_conditional_edges("approve_cost", edges.after_cost)
    g.add_conditional_edges("apply_fix", edges.after_apply)
    g.add_conditional_edges("parity", edges.after_parity)
    g.add_conditional_edges("tests", edges.after_tests)
    g.add_conditional_edges("cpu_check", edges.after_cpu_check)
    g.add_conditional_edges("profile", edges.after_profile)
    g.add_conditional_edges("profile_llm", edges.after_profile_llm)
    g.add_edge("profile_verdict", "report")
    g.add_edge("profile_revert", "report")
    g.add_edge("llm_explain", "report")
    g.add_edge("report", END)
    return g
