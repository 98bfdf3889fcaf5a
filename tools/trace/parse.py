"""Build a ``Trace`` from a run's stderr/stdout (and pytest junit XML when there is one)."""

from __future__ import annotations

import os
from pathlib import Path

from tools.trace.models import ExceptionInfo, Frame, Signature, TestOutcome, Trace
from tools.trace.pytest_out import parse_junit_xml, parse_pytest_output
from tools.trace.python_tb import parse_blocks, worker_original
from tools.trace.ranks import root_cause, spawn_failure, split_ranks
from tools.trace.signatures import classify

# Exceptions that only report that something else failed elsewhere.
WRAPPER_TYPES = ("CalledProcessError", "ProcessRaisedException", "ChildFailedError", "ProcessExitedException")
USER_PSEUDO_FILES = ("<string>", "<stdin>")
LIBRARY_MARKERS = ("/site-packages/", "/dist-packages/", "/lib/python3", "<frozen ")


def user_frame(frame: Frame, roots: list[str], library_roots: list[str]) -> Frame:
    path = frame.file
    if path in USER_PSEUDO_FILES:
        return frame.model_copy(update={"user": True})
    if any(marker in path for marker in LIBRARY_MARKERS) or path.startswith("<"):
        return frame
    for root in roots:
        root = root.rstrip("/") + "/"
        if path.startswith(root):
            return frame.model_copy(update={"file": path[len(root):], "user": True})
    if any(path.startswith(lib.rstrip("/") + "/") for lib in library_roots):
        return frame
    if not os.path.isabs(path):
        return frame.model_copy(update={"user": True})  # relative paths are printed from the repo
    return frame


def _trace_from(primary: ExceptionInfo, chain: list[ExceptionInfo], roots: list[str], library_roots: list[str], *,
                wrapped_by: str | None = None) -> Trace:
    frames = [user_frame(f, roots, library_roots) for f in primary.frames]
    user = [f for f in frames if f.user]
    extra = [(c.exc_type, c.message) for c in reversed(chain)]
    signature = classify(primary.exc_type, primary.message, extra)
    if signature.kind == "rendezvous":
        root = chain[0] if chain else primary  # the oldest exception of the chain says what failed
        first = (root.message.strip().splitlines() or [""])[0][:300]
        signature.detail = f"{signature.detail}; cause: {root.exc_type.rsplit('.', 1)[-1]}: {first}".rstrip(": ")
    chain_out = [c.model_copy(update={"frames": [user_frame(f, roots, library_roots) for f in c.frames]})
                 for c in chain]
    return Trace(
        exc_type=primary.exc_type,
        message=primary.message,
        user_frames=user,
        library_frames=len(frames) - len(user),
        signature=signature,
        chain=chain_out,
        origin=primary.origin,
        wrapped_by=wrapped_by,
    )


def parse_trace(
    stderr: str,
    *,
    stdout: str = "",
    repo_roots: list[str | Path] | None = None,
    library_roots: list[str | Path] | None = None,
    junit_xml: Path | None = None,
    junit_tests: list[TestOutcome] | None = None,
) -> Trace | None:
    """The failure described by a run's output, or ``None`` when it shows no exception.

    ``repo_roots``: absolute paths of the repository copy as the child saw it; frames under
    them are user frames and are reported relative to the root. ``library_roots``: trees that
    are never user code (Ferry itself, the Python installation). ``junit_tests``: outcomes the
    caller already read from the junit XML (then ``junit_xml`` is not read again).
    """
    roots = [str(r) for r in (repo_roots or [])]
    libs = [str(r) for r in (library_roots or [])]
    if junit_tests is not None:
        tests = list(junit_tests)
    else:
        tests = parse_junit_xml(junit_xml) if junit_xml is not None else []
    trace = _rank_trace(stderr, stdout, roots, libs, tests)
    if trace is not None:
        return trace
    blocks = parse_blocks(stderr) or parse_blocks(stdout)
    if blocks:
        # Group into chains: a block preceded by a cause/context marker continues the chain.
        chains: list[list[ExceptionInfo]] = []
        for info, marker in blocks:
            if marker and chains:
                chains[-1][-1] = chains[-1][-1].model_copy(update={"relation": marker})
                chains[-1].append(info)
            else:
                chains.append([info])
        # pytest prints one traceback per failing test: the first failure is the one to report.
        text = stderr + stdout
        is_pytest = "short test summary info" in text or "== FAILURES ==" in text
        last = chains[0] if is_pytest else chains[-1]
        primary, chain, wrapped_by = last[-1], last[:-1], None
        inner = worker_original(primary)
        spawned = spawn_failure(chains[-2][-1]) if len(chains) > 1 and not is_pytest else None
        if spawned is not None and primary.exc_type.rsplit(".", 1)[-1] not in WRAPPER_TYPES:
            # torch.multiprocessing.spawn: the failing process's traceback inside ProcessRaisedException
            wrapped_by = chains[-2][-1].exc_type
            primary = primary.model_copy(update={"origin": "subprocess"})
        elif inner is not None:
            chain, wrapped_by, primary = [*chain, primary], primary.exc_type, inner
        elif not is_pytest and primary.exc_type.rsplit(".", 1)[-1] in WRAPPER_TYPES and len(chains) > 1:
            # A subprocess failed: its own traceback (printed earlier) is the real failure.
            sub = chains[-2]
            wrapped_by = primary.exc_type
            chain = [*sub[:-1], primary]
            primary = sub[-1].model_copy(update={"origin": "subprocess"})
        trace = _trace_from(primary, chain, roots, libs, wrapped_by=wrapped_by)
        if spawned is not None and wrapped_by is not None:
            trace.rank, trace.failed_ranks = spawned[0], [spawned[0]]
        if is_pytest:
            trace.origin = "pytest"
    else:
        # pytest's own (non-native) failure format
        trace = parse_pytest_output(stdout + "\n" + stderr, roots, _trace_from_pytest)
    if trace is not None and tests:
        trace.tests = tests
    return trace


def _rank_trace(stderr: str, stdout: str, roots: list[str], libs: list[str], tests: list[TestOutcome]) -> Trace | None:
    """A torchrun job's failure: the traceback of the first failing rank (the launcher's
    ChildFailedError names it; else the first rank that printed one), never the launcher's own
    ChildFailedError. None when no rank printed a traceback (the launcher failed by itself, e.g.
    its rendezvous): the caller parses the whole output."""
    per_rank, launcher = split_ranks(stderr)
    failed = [r for r, text in per_rank.items() if parse_blocks(text)]
    if not failed:
        return None
    wrapped_by = next((info.exc_type for info, _ in parse_blocks(launcher)
                       if info.exc_type.rsplit(".", 1)[-1] == "ChildFailedError"), None)
    # the failure table follows the exception line (its ===== rules end the parsed message)
    cause = root_cause(launcher[launcher.rfind("ChildFailedError"):]) if wrapped_by is not None else None
    rank = cause.rank if cause is not None and cause.rank in failed else _first_traceback(stderr, failed)
    trace = parse_trace(per_rank[rank], stdout=stdout, repo_roots=list(roots), library_roots=list(libs),
                        junit_tests=tests)
    if trace is None:
        return None
    trace.rank, trace.failed_ranks = rank, failed
    if wrapped_by is not None:
        trace.wrapped_by = wrapped_by
        if trace.origin == "main":
            trace.origin = "subprocess"
    return trace


def _first_traceback(stderr: str, ranks: list[int]) -> int:
    """The rank whose traceback header comes first in the output."""
    for line in stderr.splitlines():
        for r in ranks:
            if line.startswith((f"[rank{r}]:", f"[default{r}]:")) and "Traceback (most recent call last)" in line:
                return r
    return ranks[0]


def _trace_from_pytest(exc_type: str, message: str, frames: list[Frame], roots: list[str]) -> Trace:
    info = ExceptionInfo(exc_type=exc_type, message=message, frames=frames, origin="pytest")
    return _trace_from(info, [], roots, [])


def signature_for_status(status: str, limit_hit: str | None = None, detail: str | None = None) -> Signature | None:
    """The signature a run gets from how it ended, before looking at its output (``detail``: the
    message saying which limit and how to raise it, when the caller has one)."""
    if status == "timeout":
        return Signature(kind="timeout", detail="wall-clock timeout: the whole process tree was killed")
    if status == "killed" and limit_hit == "teardown_hang":
        return Signature(kind="teardown_hang", detail=detail or "a process of the run did not exit by itself")
    if status == "killed" and limit_hit == "disk_quota":
        return Signature(kind="disk_quota", detail=detail or "the run wrote more than its disk cap")
    if status == "killed":
        return Signature(kind="killed_by_limit", op=limit_hit,
                         detail=detail or f"killed by the sandbox ({limit_hit or 'signal'})")
    return None
