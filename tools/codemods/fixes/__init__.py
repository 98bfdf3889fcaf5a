"""Fixes: small libcst edits at a site the caller names (a failing line, a finding's span).

The catalogue rules (``tools.codemods.rules``) find CUDA idioms anywhere in a module; a fix edits
what a run showed to be wrong at one place: the offline fix policy (``agent.policy``) turns a
diagnosis into a call of one of these. One fix per module ``fixNNN_<name>.py`` with a stable id
(``FIX0NN``), a NAME and a DESCRIPTION (``docs/codemods.md``, "Fixes"). Each is a pure function
of the source text: it returns a :class:`FixResult` (new text, edited sites, warnings) or None
when it has nothing to do, never prints and never touches files.
"""

from tools.codemods.fixes.base import Fix, FixResult, Span, source_lines, span_text, syntax_error
from tools.codemods.fixes.fix001_factory_device import FactoryDevice, add_factory_device
from tools.codemods.fixes.fix002_float32 import Float32, float32_at
from tools.codemods.fixes.fix003_host_fallback import HostFallback, host_fallback
from tools.codemods.fixes.fix004_process_group_backend import ProcessGroupBackend, per_device_backend
from tools.codemods.fixes.fix005_device_generic_api import ApiReplacement, DeviceGenericApi, device_generic_api
from tools.codemods.fixes.fix006_replace_spans import ReplaceSpans, replace_spans
from tools.codemods.fixes.fix007_statement_after_imports import StatementAfterImports, statement_after_imports
from tools.codemods.fixes.fix008_target_matmul_precision import TargetMatmulPrecision, target_matmul_precision

#: every fix class, by id
FIXES: tuple[type[Fix], ...] = (FactoryDevice, Float32, HostFallback, ProcessGroupBackend, DeviceGenericApi,
                                ReplaceSpans, StatementAfterImports, TargetMatmulPrecision)

__all__ = [
    "FIXES", "ApiReplacement", "Fix", "FixResult", "Span", "add_factory_device", "device_generic_api",
    "float32_at", "host_fallback", "per_device_backend", "replace_spans", "source_lines", "span_text",
    "statement_after_imports", "syntax_error", "target_matmul_precision",
]
