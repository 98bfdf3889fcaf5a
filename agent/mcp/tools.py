"""The MCP tools: each a typed function over Ferry's own tools or the service's sessions.

Every tool has one argument model and one result model (:data:`TOOLS`); the server derives the MCP input
and output schemas from them, so what an agent sees cannot drift from what the CLI and the LLM path use.
A tool raises :class:`ToolRefused` for input it cannot act on (the message says what to do); the server
returns it as a tool error the agent can read and correct.
"""

from __future__ import annotations

import json
import logging
import shutil
import tempfile
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ValidationError

from agent.mcp import baseline, schemas
from agent.mcp.context import Call
from agent.mcp.fingerprint import tree_fingerprint
from agent.mcp.resources import migration_resources
from agent.migration.facade import UnknownMigration, load, plan_of
from agent.service import operations
from agent.service.schemas import Approval, SessionOptions
from agent.service.store import SessionRow
from agent.service.uploads import SourceRefused, resolve_allowed
from agent.service.workers import repo_dir, session_dir
from tools.parity.models import CheckResult
from tools.profile.models import ProfileReport
from tools.runner.models import RunResult
from tools.scan.models import RewriteResult, ScanReport

logger = logging.getLogger(__name__)

ENDED = ("finished", "failed", "cancelled", "waiting_for_approval")
SOURCE_PRINT = "mcp-source.json"  # beside the session's copy: the fingerprint of what Ferry copied


class ToolRefused(ValueError):
    """The call cannot be done as asked; the message says why and what to do."""


@dataclass(frozen=True)
class ToolSpec:
    name: str
    args: type[BaseModel]
    result: type[BaseModel]
    fn: Callable[[Call, Any], BaseModel]
    runs_code: bool = False  # counts against the client's concurrent runs
    read_only: bool = True

    @property
    def description(self) -> str:
        return " ".join((self.args.__doc__ or self.name).split())


# --- paths -------------------------------------------------------------------------------------


def _allowed(call: Call, path: str, *, file_ok: bool = False) -> Path:
    """The real path a tool names, when it lies under one of the server's allowed roots (a relative path is
    taken from the server's working directory); a file only where ``file_ok``."""
    server = call.server
    given = Path(path).expanduser()
    absolute = given if given.is_absolute() else server.cwd / given
    try:
        if file_ok and absolute.is_file() and not absolute.is_symlink():
            return resolve_allowed(str(absolute.parent), server.settings.allow_roots) / absolute.name
        real = resolve_allowed(str(absolute), server.settings.allow_roots)
    except SourceRefused as exc:
        raise ToolRefused(str(exc)) from None
    baseline.record(server.calls_dir(call.owner), real)  # the first time this client names it
    return real


# --- scan, plan, rewrite -----------------------------------------------------------------------


def scan(call: Call, args: schemas.ScanArgs) -> BaseModel:
    from tools.scan.api import ScanInputError
    from tools.scan.api import scan as scan_tool
    from tools.scan.models import ScanRequest

    path = _allowed(call, args.path, file_ok=True)
    try:
        return scan_tool(ScanRequest(**{**args.model_dump(exclude={"path", "jobs"}), "path": path}))
    except ScanInputError as exc:
        raise ToolRefused(f"{exc} (give a repository folder or a .py/.ipynb file)") from None


def plan(call: Call, args: schemas.PlanArgs) -> BaseModel:
    path = _allowed(call, args.path)
    the_plan, summary = plan_of(path, run_command=args.run, test_command=args.test, device=args.device,
                                max_iterations=SessionOptions.model_fields["max_iterations"].default)
    return schemas.PlanResult(plan=the_plan, summary=summary)


def rewrite(call: Call, args: schemas.RewriteArgs) -> BaseModel:
    from tools.scan.api import ScanInputError
    from tools.scan.api import rewrite as rewrite_tool
    from tools.scan.models import RewriteRequest

    if args.write and call.server.transport != "stdio":
        raise ToolRefused("write=true changes files on the server: only a local server (`ferry mcp` over stdio) "
                          "writes the repository; apply the returned diff yourself")
    path = _allowed(call, args.path, file_ok=True)
    try:
        result = rewrite_tool(RewriteRequest(**{**args.model_dump(exclude={"path", "jobs", "write"}), "path": path}))
    except ScanInputError as exc:
        raise ToolRefused(f"{exc} (give a repository folder or a .py/.ipynb file)") from None
    if args.write:
        root = Path(result.root)
        for f in result.files:
            target = root / f.file
            if target.is_symlink() or target.read_text(encoding="utf-8") != f.original:
                raise ToolRefused(f"{f.file} changed while Ferry was rewriting it (or is a link); call rewrite again")
            target.write_text(f.rewritten, encoding="utf-8")
    return result


# --- run, check, profile -----------------------------------------------------------------------


def _env(env: dict[str, str]) -> tuple[dict[str, str], dict[str, str]]:
    """A run's variables split into Ferry's settings (FERRY_*/TPX_*) and the user's own (checked by the runner)."""
    ours = {k: v for k, v in env.items() if k.startswith(("FERRY_", "TPX_"))}
    return ours, {k: v for k, v in env.items() if k not in ours}


def keep(call: Call, kind: str, result: BaseModel) -> str:
    """A call's whole result, kept for its caller when its text had to be cut; its resource URI."""
    call_id = f"{kind}-{time.strftime('%Y%m%d-%H%M%S')}-{uuid.uuid4().hex[:8]}"
    folder = call.server.calls_dir(call.owner)
    folder.mkdir(parents=True, exist_ok=True, mode=0o700)
    (folder / f"{call_id}.json").write_text(result.model_dump_json(indent=2), encoding="utf-8")
    return f"ferry://calls/{call_id}"


def _timeout(call: Call, asked: float) -> float:
    return min(asked, call.server.limits.run_timeout_s)


def run(call: Call, args: schemas.RunArgs) -> BaseModel:
    from tools.runner.api import RunnerInputError
    from tools.runner.api import run as run_tool
    from tools.runner.models import RunRequest

    path = _allowed(call, args.path)
    ours, own = _env(args.env)
    with tempfile.TemporaryDirectory(prefix="ferry-mcp-run-", ignore_cleanup_errors=True) as tmp:
        try:
            req = RunRequest(path=path, command=args.command, device=args.device,
                             redirect_cuda=args.device if args.redirect_cuda else None, probe=args.probe,
                             seed=args.seed, timeout_s=_timeout(call, args.timeout_s), env=ours, user_env=own,
                             cwd=args.cwd, artifacts_dir=Path(tmp))
            result = run_tool(req, cancel=call.cancel)
        except (RunnerInputError, ValidationError) as exc:
            raise ToolRefused(str(exc)) from None
    # its folder is gone: the result does not name it
    result = result.model_copy(update={"artifacts_dir": None, "redirect_log_path": None, "probe_dir": None,
                                       "profile_dir": None})
    return result


def check(call: Call, args: schemas.CheckArgs) -> BaseModel:
    from tools.parity.check import CheckInputError
    from tools.parity.check import check as check_tool
    from tools.parity.models import CheckRequest

    path = _allowed(call, args.path)
    ours, _ = _env(args.target_env)
    if len(ours) != len(args.target_env):
        raise ToolRefused("target_env takes FERRY_*/TPX_* settings only, e.g. TPX_MATMUL_PRECISION=highest")
    tmp = Path(tempfile.mkdtemp(prefix="ferry-mcp-check-"))
    try:
        result = check_tool(CheckRequest(path=path, command=args.command, out_dir=tmp, steps=args.steps,
                                         seed=args.seed, timeout_s=_timeout(call, args.timeout_s),
                                         profile=args.profile, target_env=ours, cwd=args.cwd), cancel=call.cancel)
    except (CheckInputError, ValidationError) as exc:
        raise ToolRefused(str(exc)) from None
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    result = result.model_copy(update={"out_dir": "", "report_md": None, "report_json": None, "chart_png": None})
    return result


def profile(call: Call, args: schemas.ProfileArgs) -> BaseModel:
    from tools.profile.report import ProfileError, build_profile_report
    from tools.runner.api import RunnerInputError
    from tools.runner.api import run as run_tool
    from tools.runner.models import RunRequest

    path = _allowed(call, args.path)
    with tempfile.TemporaryDirectory(prefix="ferry-mcp-profile-", ignore_cleanup_errors=True) as tmp:
        try:
            result = run_tool(RunRequest(path=path, command=args.command, device="tpx", redirect_cuda="tpx",
                                         profile=True, seed=args.seed, timeout_s=_timeout(call, args.timeout_s),
                                         cwd=args.cwd, artifacts_dir=Path(tmp)), cancel=call.cancel)
        except (RunnerInputError, ValidationError) as exc:
            raise ToolRefused(str(exc)) from None
        if result.profile_dir is None:
            raise ToolRefused(f"the run left no profile (status {result.status}, exit {result.exit_code}): "
                              f"{result.stderr_tail[-1500:]}")
        try:
            report = build_profile_report(Path(result.profile_dir), path)
        except ProfileError as exc:
            raise ToolRefused(f"no profile: {exc}") from None
    report = report.model_copy(update={"profile_dir": ""})
    return report


# --- migrations --------------------------------------------------------------------------------


def _row(call: Call, sid: str) -> SessionRow:
    """The caller's migration; another owner's is answered exactly like one that does not exist."""
    from agent.ids import id_problem

    if id_problem(sid) is None:
        row = call.server.store.get(sid, call.owner)
        if row is not None:
            return row
    raise ToolRefused(f"no migration {sid[:80]!r} of yours on this server; `migrate` returns the id")


def _verdict(call: Call, row: SessionRow) -> schemas.Verdict:
    """Ferry's verdict, withdrawn when the repository changed after Ferry copied it."""
    if row.state != "finished":
        return schemas.Verdict(status=row.status, migrated=False,
                               reason=f"the migration is {row.state.replace('_', ' ')}: no verdict yet"
                               if row.state in ("queued", "running", "waiting_for_approval") else
                               f"the migration is {row.state}")
    migrated = row.status == "migrated"
    copied = _copied_print(call, row)
    if row.source.kind == "path" and copied is not None:
        now = tree_fingerprint(Path(row.source.name))
        if now != copied:
            return schemas.Verdict(status=row.status, migrated=False, stale=True, reason=(
                "the repository changed after Ferry copied it: this verdict covers the copy, not your edits; "
                "call `migrate` again so that Ferry verifies the tree as it is now"))
    why = ("the program ran on the device, the tests passed and parity passed" if migrated else
           f"Ferry's verdict is {row.status}: see the report resource for what failed")
    return schemas.Verdict(status=row.status, migrated=migrated, reason=why)


def _copied_print(call: Call, row: SessionRow) -> str | None:
    path = session_dir(call.server.settings, row.id) / SOURCE_PRINT
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    value = data.get("fingerprint") if isinstance(data, dict) else None
    return value if isinstance(value, str) else None


def _view(call: Call, row: SessionRow) -> schemas.MigrationView:
    question = None
    if row.state == "waiting_for_approval":
        try:
            asked = load(row.migration_id, call.server.settings.data_dir).interrupts
        except UnknownMigration:
            asked = []
        if asked:
            data = asked[0].data()
            question = str(data.get("question") or data.get("summary") or "approve or reject the proposed edit")
    return schemas.MigrationView(id=row.id, state=row.state, step=row.step, summary=row.summary,
                                 verdict=_verdict(call, row), question=question, error=row.error,
                                 resources=migration_resources(row.id) if row.state == "finished" else [])


def _follow(call: Call, sid: str, wait_s: float) -> schemas.MigrationView:
    """Wait up to ``wait_s`` for the migration to end or to need an answer, reporting each step as progress."""
    store = call.server.store
    deadline = time.monotonic() + wait_s
    seen = 0
    steps = 0
    while True:
        row = _row(call, sid)
        for ev in store.events_after(sid, seen):
            seen = max(seen, ev.id)
            if ev.kind == "step":
                steps += 1
                node = ev.data.get("node", "?") if isinstance(ev.data, dict) else "?"
                summary = ev.data.get("summary", "") if isinstance(ev.data, dict) else ""
                call.progress(float(steps), f"{node}: {summary}"[:300])
        if row.state in ENDED or time.monotonic() >= deadline or call.cancel.is_set():
            return _view(call, row)
        with store.changed:
            store.changed.wait(timeout=min(0.5, max(0.0, deadline - time.monotonic())))


def migrate(call: Call, args: schemas.MigrateArgs) -> BaseModel:
    path = _allowed(call, args.path)
    weakened = baseline.check(call.server.calls_dir(call.owner), path).findings
    if weakened:
        raise ToolRefused(
            "guard_refused: the repository's tests are weaker than when Ferry first saw them, so no migration "
            "of it can be called migrated: " + "; ".join(f.describe() for f in weakened[:10]) +
            ". Restore the tests (fix the code, not the checks); only a person can accept such a change, with "
            f"`ferry mcp --accept-tests {path}` at the server (see docs/guard.md).")
    opts = SessionOptions(**args.model_dump(exclude={"path", "wait_s"}))
    server = call.server
    try:
        sid = operations.create_from_path(server.settings, server.store, call.owner, opts, str(path))
    except operations.OptionRefused as exc:
        raise ToolRefused(f"{exc.field}: {exc}") from None
    except operations.Refused as exc:
        raise ToolRefused(str(exc)) from None
    record = {"fingerprint": tree_fingerprint(repo_dir(server.settings, sid))}
    (session_dir(server.settings, sid) / SOURCE_PRINT).write_text(json.dumps(record), encoding="utf-8")
    return _follow(call, sid, args.wait_s)


def status(call: Call, args: schemas.TaskArgs) -> BaseModel:
    _row(call, args.id)
    return _follow(call, args.id, args.wait_s)


def resume(call: Call, args: schemas.ResumeArgs) -> BaseModel:
    row = _row(call, args.id)
    try:
        operations.answer(call.server.settings, call.server.store, row, Approval(action=args.action))
    except operations.Refused as exc:
        raise ToolRefused(str(exc)) from None
    return _follow(call, args.id, args.wait_s)


def cancel(call: Call, args: schemas.CancelArgs) -> BaseModel:
    row = _row(call, args.id)
    if row.state in ("finished", "failed", "cancelled"):
        raise ToolRefused(f"migration {row.id} is {row.state} already; nothing to cancel")
    server = call.server
    return _view(call, operations.cancel(server.settings, server.store, server.workers, row))


# --- explain, knowledge ------------------------------------------------------------------------


def explain(call: Call, args: schemas.ExplainArgs) -> BaseModel:
    from agent.chat import intents
    from agent.policy.catalogue import known_rules
    from agent.service.routes.messages import facts_of
    from tools import doclinks

    if args.id is not None:
        row = _row(call, args.id)
        if args.file and args.line:
            reply = intents.reply(f"why did you change line {args.line} of {args.file}",
                                  facts_of(row, call.server.settings))
            return schemas.Explanation(text=reply.text)
        v = _verdict(call, row)
        text = f"Migration {row.id}: {row.state}" + (f", status {row.status}" if row.status else "") + \
            f". {v.reason}." + (f" Last step: {row.step}: {row.summary}" if row.step else "")
        return schemas.Explanation(text=text)
    if args.rule:
        from agent.chat.named_rules import rule_ids_in

        rules = known_rules()
        named, unknown = rule_ids_in(args.rule, rules)
        if args.rule.strip() in rules:
            named = [args.rule.strip()]
        if not named:
            raise ToolRefused(f"{unknown or f'I know no rule {args.rule!r}.'} Rule ids look like FRY013 (see "
                              "`scan` results)")
        rule = named[0]
        docs = [doclinks.absolute(doclinks.idiom(rule))] if rule.startswith("FRY") else []
        return schemas.Explanation(text=f"{rule}: {rules[rule]}", docs=docs)
    raise ToolRefused("name a rule (rule='FRY013') or a migration (id=..., optionally file and line)")


def knowledge_search(call: Call, args: schemas.KnowledgeArgs) -> BaseModel:
    from agent.knowledge import KnowledgeError, search
    from tools import doclinks

    try:
        matches = search(args.query, args.k)
    except KnowledgeError as exc:
        raise ToolRefused(f"the knowledge base cannot be searched: {exc}") from None
    return schemas.KnowledgeResult(hits=[
        schemas.KnowledgeHit(kind=m.kind, id=m.id, title=m.title, text=m.text, example=m.example,
                             cite=doclinks.absolute(doclinks.idiom(m.id)) if m.id.startswith("FRY") else None)
        for m in matches])


TOOLS: dict[str, ToolSpec] = {t.name: t for t in (
    ToolSpec("scan", schemas.ScanArgs, ScanReport, scan),
    ToolSpec("plan", schemas.PlanArgs, schemas.PlanResult, plan),
    ToolSpec("rewrite", schemas.RewriteArgs, RewriteResult, rewrite, read_only=False),
    ToolSpec("run", schemas.RunArgs, RunResult, run, runs_code=True),
    ToolSpec("check", schemas.CheckArgs, CheckResult, check, runs_code=True),
    ToolSpec("profile", schemas.ProfileArgs, ProfileReport, profile, runs_code=True),
    ToolSpec("migrate", schemas.MigrateArgs, schemas.MigrationView, migrate, read_only=False),
    ToolSpec("status", schemas.TaskArgs, schemas.MigrationView, status),
    ToolSpec("resume", schemas.ResumeArgs, schemas.MigrationView, resume, read_only=False),
    ToolSpec("cancel", schemas.CancelArgs, schemas.MigrationView, cancel, read_only=False),
    ToolSpec("explain", schemas.ExplainArgs, schemas.Explanation, explain),
    ToolSpec("knowledge_search", schemas.KnowledgeArgs, schemas.KnowledgeResult, knowledge_search),
)}
