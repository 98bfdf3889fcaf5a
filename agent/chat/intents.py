"""The chat of a migration session: what a user's message means, understood without a model.

Pure and typed: the service hands in the session's facts (:class:`SessionFacts`) and gets a
:class:`Reply` (the text the user reads, the intent understood, and the :data:`Action` the service
must carry out, if any). No I/O, no store. With a model configured, :mod:`agent.chat.model_replies`
answers instead and acts through the same actions (its tools' schemas derive from these models).
"""

from __future__ import annotations

import re
from typing import Annotated, Any, Literal

from pydantic import BaseModel, Field

from agent.chat.diffs import Hunk, changes_of, edited_lines, edits_covering, hunks_of
from agent.chat.named_rules import applied_rules, match_rules, rule_ids_in
from agent.migration import records
from agent.redact import shipped_docs

State = Literal["queued", "running", "waiting_for_approval", "finished", "failed", "cancelled"]
ENDED = ("finished", "failed", "cancelled")
Intent = Literal["explain", "skip_rule", "revert_rule", "set_run", "set_test", "set_device", "retry", "approve",
                 "reject", "status", "help", "unknown"]


class SessionFacts(BaseModel):
    """What the service knows of the session (built from the session and the state's readers)."""

    state: str = Field(description="queued|running|waiting_for_approval|finished|failed|cancelled")
    status: str | None = Field(default=None, description="the migration's named status once finished")
    summary: str | None = None
    run: str
    test: str | None = None
    device: str = "accelerator"
    skip_rules: list[str] = Field(default_factory=list)
    edits: list[records.Edit] = Field(default_factory=list)
    interrupts: list[dict[str, Any]] = Field(default_factory=list)
    rules: dict[str, str] = Field(default_factory=dict, description="every known rule id -> its description")
    findings: list[records.ReviewItem] = Field(default_factory=list, description=(
        "the scan of the original code: where each catalogue rule matched (file, line), to tell one rule's "
        "changes from the others' in a codemod edit of several rules"))


class SetOptions(BaseModel):
    """Change the session's run command, test command or target device (for its next attempt)."""

    kind: Literal["set_options"] = "set_options"
    run: str | None = Field(default=None, description="the new run command")
    test: str | None = Field(default=None, description="the new test command")
    device: Literal["accelerator", "tpx"] | None = Field(default=None, description="the codemods' target device")


class Retry(BaseModel):
    """Run the migration again (after it ended)."""

    kind: Literal["retry"] = "retry"


class SkipRules(BaseModel):
    """Leave these rules out: one not applied yet is skipped, one applied is reverted; both re-run without them."""

    kind: Literal["skip_rules"] = "skip_rules"
    rules: list[str] = Field(min_length=1, description="rule ids (FRY024, float64_to_float32, ...)")


class Decide(BaseModel):
    """Answer the pending approval question."""

    kind: Literal["decide"] = "decide"
    action: Literal["approve", "reject"]


Action = Annotated[SetOptions | Retry | SkipRules | Decide, Field(discriminator="kind")]


class Reply(BaseModel):
    text: str = Field(description="what the user reads (Markdown)")
    intent: Intent
    action: Action | None = Field(default=None, description="what the service must do (None: an answer only)")


CAN_DO = ("- **explain** an edit: `why did you change line 40?`, `why line 40 of model.py`, `explain FRY012`\n"
          "- **skip or revert** a rule: `skip the AMP change`, `don't do FRY020`, `revert FRY012`\n"
          "- **change the commands**: `the run command is python main.py --x`, `run with python main.py`, "
          "`the test command is ...`\n"
          "- **change the device**: `use tpx, not the generic device`, `target the generic accelerator`\n"
          "- **retry**: `try again`; **approve** / **reject** a pending edit; **status**; **help**")

_CMD = r"\s*(?:is|=|:|to|with)?\s*(?P<cmd>.+)"
_TEST_CMD = re.compile(r"^(?:the\s+)?(?:tests?\s+command|test\s+with|tests\s+with|run\s+the\s+tests\s+with)\b"
                       + _CMD, re.I | re.S)
_RUN_CMD = re.compile(r"^(?:the\s+)?(?:run\s+command|command|run\s+with|run\s+it\s+with|use(?=\s+`))\b"
                      + _CMD, re.I | re.S)
_BACKTICKS = re.compile(r"`+([^`]+)`+")
_LINE = re.compile(r"\bline\s+(\d+)\b", re.I)
_FILE = re.compile(r"[\w./-]+\.(?:py|ipynb)\b")
_SKIP = re.compile(r"\b(skip|don'?t|do\s+not|leave\s+out|without|drop|exclude|no\s+more|stop\s+doing)\b", re.I)
_REVERT = re.compile(r"\b(revert|undo|roll\s*back|take\s+back|remove)\b", re.I)
_DEVICE_WORDS = re.compile(r"\b(tpx|generic\s+(?:device|accelerator)|accelerator)\b", re.I)
_RETRY = re.compile(r"\b(try\s+again|retry|re-?run|run\s+(?:it\s+)?again|start\s+again|once\s+more)\b", re.I)
_STATUS = re.compile(r"^(?:status|what(?:'s| is)\s+(?:the\s+)?status|what\s+are\s+you\s+doing|where\s+are\s+you|"
                     r"progress|how(?:'s| is)\s+it\s+going|what(?:'s| is)\s+happening)\b", re.I)
_HELP = re.compile(r"^(?:help|\?|what\s+can\s+you\s+do|commands)\b", re.I)
_APPROVE = re.compile(r"^(?:please\s+|ok,?\s+|yes,?\s+)?(?:approve|accept|apply\s+it|go\s+ahead)\b", re.I)
_REJECT = re.compile(r"^(?:please\s+|no,?\s+)?(?:reject|decline|deny|refuse)\b", re.I)
_EXPLAIN = re.compile(r"\b(why|explain|what\s+did\s+you|reason)\b", re.I)


def reply(text: str, facts: SessionFacts) -> Reply:
    """The offline answer to one message of the user (no model)."""
    msg = text.strip()
    if not msg:
        return Reply(text="Your message is empty. " + _can_do(), intent="help")
    for parse in (_set_test, _set_run, _help, _status, _decide, _set_device, _retry, _skip_or_revert, _explain):
        out = parse(msg, facts)
        if out is not None:
            return out
    return Reply(intent="unknown",
                 text=f"I did not understand {_quote(msg)}; without a model I only understand these:\n\n{CAN_DO}")


# --- the intents ------------------------------------------------------------------------------


def _help(msg: str, facts: SessionFacts) -> Reply | None:
    return Reply(text=_can_do(), intent="help") if _HELP.search(msg) else None


def _status(msg: str, facts: SessionFacts) -> Reply | None:
    return Reply(text=status_text(facts), intent="status") if _STATUS.search(msg) else None


def status_text(facts: SessionFacts) -> str:
    """The session's state in a few lines."""
    head = {"queued": "The session is queued: it starts when a worker is free.",
            "running": "The migration is running.",
            "waiting_for_approval": "The migration is waiting for your approval.",
            "finished": f"The migration finished: **{facts.status or 'unknown'}**.",
            "failed": f"The migration failed{f': **{facts.status}**' if facts.status else ''}.",
            "cancelled": "The session was cancelled."}.get(facts.state, f"The session is {facts.state}.")
    lines = [head]
    if facts.summary:
        lines.append(facts.summary)
    rules = applied_rules(facts.edits)
    lines.append(f"{len(facts.edits)} edit(s) so far" + (f" (rules {', '.join(rules)})." if rules else "."))
    for q in facts.interrupts:
        lines.append(f"Waiting on: {q.get('rule', '?')} at {q.get('site') or '?'}: {q.get('reason', '')}".rstrip())
    lines.append(f"Run: `{facts.run}`; tests: `{facts.test or '(none)'}`; device: {facts.device}"
                 + (f"; skipped by request: {', '.join(facts.skip_rules)}." if facts.skip_rules else "."))
    return "\n\n".join(lines)


def _decide(msg: str, facts: SessionFacts) -> Reply | None:
    choice: Literal["approve", "reject"] | None = (
        "approve" if _APPROVE.search(msg) else "reject" if _REJECT.search(msg) else None)
    if choice is None:
        return None
    if facts.state != "waiting_for_approval":
        return Reply(intent=choice, text=f"There is nothing to {choice}: the session is {_state_words(facts)}, not "
                                         "waiting for an approval.")
    asked = "; ".join(f"{q.get('rule', '?')} at {q.get('site') or '?'}" for q in facts.interrupts) or "the pending edit"
    guard = any(q.get("type") == "approve_guard" for q in facts.interrupts)  # a test lost in the tests run
    if guard:
        done = ("Approved: the test guard's {} is accepted and recorded as such." if choice == "approve"
                else "Rejected: the test guard's refusal of {} stands (the migration ends guard_refused).")
    else:
        done = ("Approved: {} is applied and verified by the next run." if choice == "approve"
                else "Rejected: {} is not applied (the migration ends rejected).")
    done = done.format(asked)
    return Reply(intent=choice, action=Decide(action=choice), text=done)


def _command(match: re.Match[str], msg: str) -> str:
    quoted = _BACKTICKS.search(msg)
    cmd = quoted.group(1) if quoted else match.group("cmd")
    return cmd.strip().strip("\"'").strip()


def _set_test(msg: str, facts: SessionFacts) -> Reply | None:
    m = _TEST_CMD.search(msg)
    if m is None or not _command(m, msg):
        return None
    cmd = _command(m, msg)
    if cmd == facts.test:
        return Reply(intent="set_test", text=f"The test command is `{cmd}` already; nothing changes.")
    return Reply(intent="set_test", action=SetOptions(test=cmd),
                 text=f"Test command set to `{cmd}`. {_when_it_applies(facts)}")


def _set_run(msg: str, facts: SessionFacts) -> Reply | None:
    m = _RUN_CMD.search(msg)
    if m is None or not _command(m, msg) or (_DEVICE_WORDS.search(m.group("cmd")) and not _BACKTICKS.search(msg)):
        return None  # "use tpx" is a device, not a command
    cmd = _command(m, msg)
    if cmd == facts.run:
        return Reply(intent="set_run", text=f"The run command is `{cmd}` already; nothing changes.")
    return Reply(intent="set_run", action=SetOptions(run=cmd),
                 text=f"Run command set to `{cmd}`. {_when_it_applies(facts)}")


def _wanted_device(msg: str) -> Literal["accelerator", "tpx"] | None:
    """The device the message asks for: the one it names that is not negated ("tpx, not the generic device")."""
    wanted: list[Literal["accelerator", "tpx"]] = []
    refused: list[Literal["accelerator", "tpx"]] = []
    for m in _DEVICE_WORDS.finditer(msg):
        before = msg[max(0, m.start() - 20):m.start()].lower()
        device: Literal["accelerator", "tpx"] = "tpx" if m.group(1).lower() == "tpx" else "accelerator"
        negated = re.search(r"\b(not|no|don'?t\s+use|do\s+not\s+use|instead\s+of|rather\s+than)\s+(the\s+)?$", before)
        (refused if negated else wanted).append(device)
    if not wanted and len(set(refused)) == 1:  # "don't use tpx": the other one
        return "accelerator" if refused[0] == "tpx" else "tpx"
    return wanted[0] if len(set(wanted)) == 1 else None


def _set_device(msg: str, facts: SessionFacts) -> Reply | None:
    if not _DEVICE_WORDS.search(msg) or not re.search(r"\b(use|target|device|switch|instead|on)\b", msg, re.I):
        return None
    device = _wanted_device(msg)
    if device is None:
        return Reply(intent="set_device", text="Which device: `tpx` (the codemods name tpx) or the generic "
                                               "accelerator (`torch.accelerator`, the default)?")
    what = "tpx" if device == "tpx" else "the generic accelerator (`torch.accelerator`)"
    if device == facts.device:
        return Reply(intent="set_device", text=f"The codemods target {what} already; nothing changes.")
    return Reply(intent="set_device", action=SetOptions(device=device),
                 text=f"The codemods will target {what}. {_when_it_applies(facts)}")


def _retry(msg: str, facts: SessionFacts) -> Reply | None:
    if not _RETRY.search(msg):
        return None
    if facts.state in ("running", "queued"):
        return Reply(intent="retry", text=f"The session is {_state_words(facts)}; there is nothing to retry yet.")
    if facts.state == "waiting_for_approval":
        return Reply(intent="retry", text="The migration is waiting for your approval: approve or reject the "
                                          "pending edit first.")
    return Reply(intent="retry", action=Retry(), text="Running the migration again"
                 + (f" (skipping {', '.join(facts.skip_rules)})." if facts.skip_rules else "."))


def _skip_or_revert(msg: str, facts: SessionFacts) -> Reply | None:
    revert = _REVERT.search(msg) is not None
    if not revert and _SKIP.search(msg) is None:
        return None
    ids, unknown = rule_ids_in(msg, facts.rules)
    if unknown:
        return Reply(intent="revert_rule" if revert else "skip_rule", text=unknown)
    applied = applied_rules(facts.edits)
    if not ids:
        found = match_rules(msg, facts.rules, applied)
        if not found.rules:
            return Reply(intent="revert_rule" if revert else "skip_rule",
                         text="Which rule? I found none matching your words. " + _applied_list(facts))
        if len(found.rules) > 1 and not found.all:
            listing = "\n".join(f"- `{r}`{' (applied)' if r in applied else ''}: {_short(facts.rules.get(r, ''))}"
                                for r in found.rules)
            return Reply(intent="revert_rule" if any(r in applied for r in found.rules) else "skip_rule",
                         text=f"Several rules match; which one? (say e.g. `skip {found.rules[0]}`, or `skip all "
                              f"of them`)\n\n{listing}")
        ids = found.rules
    new = [r for r in ids if r not in facts.skip_rules]
    reverting = [r for r in new if r in applied]
    intent: Intent = "revert_rule" if reverting or revert else "skip_rule"
    if not new:
        return Reply(intent=intent, text=f"{', '.join(ids)} {'is' if len(ids) == 1 else 'are'} skipped already.")
    if facts.state == "cancelled":
        return Reply(intent=intent, text="The session was cancelled; start a new one with these rules skipped.")
    parts = []
    if reverting:
        parts.append(f"reverting {', '.join(reverting)} (its edits are undone)")
    if [r for r in new if r not in reverting]:
        parts.append(f"skipping {', '.join(r for r in new if r not in reverting)}")
    them = "it" if len(new) == 1 else "them"
    when = (f"The session will run without {them} when it starts." if facts.state == "queued" else
            f"The migration runs again without {them}.")
    text = "; ".join(parts)
    return Reply(intent=intent, action=SkipRules(rules=new), text=f"{text[:1].upper()}{text[1:]}. {when}")


def _explain(msg: str, facts: SessionFacts) -> Reply | None:
    line = _LINE.search(msg)
    ids, _ = rule_ids_in(msg, facts.rules)
    file = _FILE.search(msg)
    if not (_EXPLAIN.search(msg) or line or ids):
        return None
    if ids:
        return Reply(intent="explain", text="\n\n".join(_rule_text(r, facts) for r in ids))
    if line is not None:
        n = int(line.group(1))
        covered = edits_covering(facts.edits, n, file.group(0) if file else None)
        where = f"line {n}" + (f" of {file.group(0)}" if file else "")
        if not covered:
            return Reply(intent="explain", text=f"No edit of this session changed {where}. " + _applied_list(facts))
        return Reply(intent="explain", text="\n\n".join(_edit_text(e, hunks) for e, hunks in covered))
    if file is not None:
        name = file.group(0)
        shown = [e for e in facts.edits if any(f == name or f.endswith("/" + name) for f in e.files)]
        if shown:
            return Reply(intent="explain", text="\n\n".join(_edit_text(e, hunks_of(e.diff)) for e in shown))
        return Reply(intent="explain", text=f"No edit of this session changed {name}. " + _applied_list(facts))
    if not facts.edits:
        return Reply(intent="explain", text="No edit was made in this session yet. " + status_text(facts))
    listing = "\n".join(f"- {e.step}: {e.by} in {', '.join(e.files)}" + (f" at {e.site}" if e.site else "")
                        + f": {shipped_docs(e.reason)}" for e in facts.edits)
    return Reply(intent="explain", text="The edits so far (ask `why line N of FILE` or `explain RULE` for one):\n\n"
                 + listing)


def rule_doc(rule_id: str) -> str | None:
    """The idiom catalogue's section of a catalogue rule (docs/idioms.md, one anchor per rule id)."""
    return f"docs/idioms.md#{rule_id.lower()}" if re.fullmatch(r"FRY\d{3}", rule_id) else None


def rule_changes(rule_id: str, edit: records.Edit, facts: SessionFacts) -> list[Hunk] | None:
    """The smallest changes of ``edit`` that ``rule_id`` made: in an edit of several codemods, the changes at
    the lines where the scan of the original found that rule; the edit's hunks when it is the rule's alone;
    None when the edit has several rules and no scan says which change is whose."""
    rules = [r for r in edit.rule.split(",") if r]
    if rules == [rule_id]:
        return hunks_of(edit.diff)
    lines: dict[str, set[int]] = {}
    for f in facts.findings:
        if f.rule == rule_id:
            lines.setdefault(f.file, set()).add(f.line)
    if not lines:
        return None
    return [c for h in hunks_of(edit.diff) for c in changes_of(h)
            if any(_same(h.file, f) and set(c.changed_old) & ns for f, ns in lines.items())]


def _same(name: str, wanted: str) -> bool:
    return name == wanted or name.endswith("/" + wanted) or wanted.endswith("/" + name)


def _rule_text(rule_id: str, facts: SessionFacts) -> str:
    """One rule explained: what it matches, where it changed this session's code (file:line), those changes'
    diff only (not its neighbours'), and the rule's section of the idiom catalogue."""
    desc = facts.rules.get(rule_id, "")
    doc = rule_doc(rule_id)
    more = f"\n\nMore: [{rule_id} in the idiom catalogue]({doc})." if doc else ""
    head = f"**{rule_id}**" + (f" (what it matches -> what it writes): {shipped_docs(desc)}" if desc else "")
    shown = [e for e in facts.edits if rule_id in e.rule.split(",")]
    if not shown:
        return f"{head}\n\n{rule_id} made no edit in this session. {_applied_list(facts)}{more}"
    parts: list[str] = [head]
    for edit in shown:
        changes = rule_changes(rule_id, edit, facts)
        if changes is None:  # no scan to tell the rules apart: the whole edit, said so
            parts.append(f"It is one of the rules of {edit.step} ({edit.rule}); its changes are among these:\n\n"
                         + _edit_text(edit, hunks_of(edit.diff)))
            continue
        if not changes:
            continue
        sites = ", ".join(dict.fromkeys(f"{c.file}:{c.new_start if c.new_len else c.old_start}" for c in changes))
        by = "a codemod" if edit.kind == "codemod" else edit.by
        why = "" if edit.kind == "codemod" else f" ({shipped_docs(edit.reason)})"
        parts.append(f"In {edit.step}, {by} changed {sites}{why}:\n\n```diff\n{_excerpt(changes)}\n```")
    if len(parts) == 1:
        parts.append(f"{rule_id} is listed among {', '.join(e.step for e in shown)}, but no change of it was "
                     "found in the diff.")
    return "\n\n".join(parts) + more


def _excerpt(hunks: list[Hunk], max_lines: int = 24) -> str:
    lines = [ln for h in hunks for ln in h.text.splitlines()]
    return "\n".join(lines[:max_lines]) + ("\n..." if len(lines) > max_lines else "")


# --- wording ----------------------------------------------------------------------------------


def _edit_text(edit: records.Edit, hunks: list[Hunk], max_lines: int = 24) -> str:
    where = f" at {edit.site}" if edit.site else ""
    return (f"**{edit.step}**, by {edit.by} (rule `{edit.rule}`, {edit.kind}) in {', '.join(edit.files)}{where}: "
            f"{shipped_docs(edit.reason)}\n\n```diff\n{_excerpt(hunks, max_lines)}\n```")


def _applied_list(facts: SessionFacts) -> str:
    lines = edited_lines(facts.edits)
    if not lines:
        return "No edit was made in this session yet."
    return "Edited: " + "; ".join(f"{f} lines {_ranges(ns)}" for f, ns in lines.items()) + "."


def _ranges(numbers: list[int]) -> str:
    out: list[str] = []
    start = prev = numbers[0]
    for n in [*numbers[1:], -1]:
        if n == prev + 1:
            prev = n
            continue
        out.append(str(start) if start == prev else f"{start}-{prev}")
        start = prev = n
    return ", ".join(out)


def _when_it_applies(facts: SessionFacts) -> str:
    return {"queued": "The session will use it when it starts.",
            "running": "The migration is running: it applies to the next attempt (this one goes on as it was).",
            "waiting_for_approval": "It applies to the next attempt (answer the pending approval first).",
            "cancelled": "The session was cancelled: it applies only if the session is started again.",
            }.get(facts.state, "Say `try again` to run the migration with it.")


def _state_words(facts: SessionFacts) -> str:
    return facts.state.replace("_", " ") + (f" ({facts.status})" if facts.status else "")


def _short(text: str, limit: int = 160) -> str:
    return text if len(text) <= limit else text[:limit].rsplit(" ", 1)[0] + " ..."


def _can_do() -> str:
    return f"Without a model I understand:\n\n{CAN_DO}"


def _quote(msg: str, limit: int = 120) -> str:
    one = " ".join(msg.split())
    return f"“{one[:limit]}{'...' if len(one) > limit else ''}”"

