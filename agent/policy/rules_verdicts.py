"""Signatures no edit should fix automatically: stop with a named status and the figures."""

from __future__ import annotations

import re

from agent.policy.base import Diagnosis, FixContext, PolicyRule, Verdict

FIGURES = re.compile(r"(requested|allocated|capacity|free|reserved)[^0-9]{0,20}([0-9.]+\s*[KMGT]?i?B)", re.IGNORECASE)
BACKEND_DOWN = re.compile(r"^tpx: could not (build|load)|Failed to load the backend extension: tpx", re.IGNORECASE)

NO_COLLECTIVES = re.compile(r"ProcessGroup(\w+)::(\w+): unsupported device type (\w+)")


class BackendUnavailable(PolicyRule):
    """The tpx backend itself did not load in the sandbox: an environment failure, not the user's code."""

    ID = "tpx_backend_unavailable"
    KINDS = ("other", "import_error")
    ORDER = 10
    DESCRIPTION = "tpx could not build/load: failed_sandbox (the environment, not the code); no edit"

    @classmethod
    def apply(cls, diag: Diagnosis, ctx: FixContext) -> Verdict | None:
        if not BACKEND_DOWN.search(diag.message or ""):
            return None
        return cls.verdict(
            status="failed_sandbox",
            summary=(f"the tpx backend could not load inside the sandbox ({diag.first_line[:300]}); "
                     "this is the environment, not the code: check `ferry doctor` and the backend's build cache"),
        )


class NoCollectiveBackend(PolicyRule):
    """The device has no collective backend: DDP on it needs a backend registered for it."""

    ID = "no_collective_backend"
    KINDS = ("other",)
    ORDER = 20
    DESCRIPTION = "no collective backend registered for the device: needs_human; no edit"

    @classmethod
    def apply(cls, diag: Diagnosis, ctx: FixContext) -> Verdict | None:
        m = NO_COLLECTIVES.search(diag.message or "")
        if not m:
            return None
        group, op, dev = m.groups()
        return cls.verdict(
            status="needs_human",
            summary=(f"{group.lower()} cannot run {op} on {dev} tensors (at {diag.where()}) and no collective "
                     f"backend is registered for {dev}; distributed training on {dev} needs one (torch.distributed."
                     f"Backend.register_backend with devices=['{dev}']), or keep the DDP model on the CPU. A decision "
                     "for a person."),
        )


class TpxOutOfMemory(PolicyRule):
    ID = "tpx_oom_report"
    KINDS = ("tpx_oom",)
    ORDER = 100
    DESCRIPTION = "tpx out of memory: needs_human with the figures; no edit"

    @classmethod
    def apply(cls, diag: Diagnosis, ctx: FixContext) -> Verdict | None:
        if diag.kind != "tpx_oom":
            return None
        figures = ", ".join(f"{k.lower()} {v}" for k, v in FIGURES.findall(diag.message)) or diag.first_line
        return cls.verdict(
            status="needs_human",
            summary=(f"tpx ran out of memory at {diag.where()} ({figures}). Reducing the batch size, using "
                     "activation checkpointing or raising the simulated capacity (TPX_MEMORY_CAPACITY) is a "
                     "decision for a person; Ferry does not change it."),
        )


class CudaOnlyPackage(PolicyRule):
    ID = "cuda_only_package"
    KINDS = ("missing_cuda_package",)
    ORDER = 110
    DESCRIPTION = "a CUDA-only package is imported: needs_human; no edit"

    @classmethod
    def apply(cls, diag: Diagnosis, ctx: FixContext) -> Verdict | None:
        if diag.kind != "missing_cuda_package":
            return None
        return cls.verdict(
            status="needs_human",
            summary=(f"a CUDA-only package is required at {diag.where()} ({diag.first_line}). "
                     "It has no tpx build; replace it with the native PyTorch equivalent or guard the import "
                     "(see docs/codemods.md, \"Coverage of the catalogue\")."),
        )


class EditBrokeSyntax(PolicyRule):
    """A file Ferry edited no longer parses: the edit's fault, not the environment's."""

    ID = "edit_broke_syntax"
    KINDS = ("syntax_error",)
    ORDER = 115
    DESCRIPTION = "a file Ferry edited no longer parses: needs_human; no edit"

    @classmethod
    def apply(cls, diag: Diagnosis, ctx: FixContext) -> Verdict | None:
        site = diag.site
        if diag.kind != "syntax_error" or diag.phase == "parity" or site is None or site.file not in ctx.files:
            return None
        return cls.verdict(status="needs_human",
                           summary=f"an edited file no longer parses at {diag.where()}: {diag.message}")


class UserEnvironmentError(PolicyRule):
    ID = "environment_error"
    KINDS = ("import_error", "syntax_error")
    ORDER = 120
    DESCRIPTION = "an import or syntax error: needs_human; no edit"

    @classmethod
    def apply(cls, diag: Diagnosis, ctx: FixContext) -> Verdict | None:
        if diag.kind not in ("import_error", "syntax_error") or diag.phase == "parity":
            return None
        return cls.verdict(
            status="needs_human",
            summary=f"{diag.exc_type or diag.kind} at {diag.where()}: {diag.first_line} "
                    "(the environment or the code itself is broken, not its device use)",
        )


class TeardownHang(PolicyRule):
    """The run did its work and printed its output, but a process never exited (the runner ended it,
    ``sandbox.teardown``): never ``migrated``, since a job that does not end is not one that works."""

    ID = "teardown_hang_report"
    KINDS = ("teardown_hang",)
    ORDER = 130
    DESCRIPTION = "the run's work was done but a process did not exit: needs_human with its stack; no edit"

    @classmethod
    def apply(cls, diag: Diagnosis, ctx: FixContext) -> Verdict | None:
        if diag.kind != "teardown_hang":
            return None
        return cls.verdict(
            status="needs_human",
            summary=(f"the {diag.phase} did its work and printed its output, but did not exit by itself: "
                     f"{diag.first_line} (at {diag.where()}). Ferry ended it; each stuck process's Python stack is "
                     "in the run's trace (result.json). A program that does not end is not migrated: find what "
                     "keeps it alive (a thread, an atexit handler, a collective its peers never join)."),
        )
