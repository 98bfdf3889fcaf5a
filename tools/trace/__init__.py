"""Trace parsing: Python tracebacks, chained exceptions, pytest output and junit XML,
DataLoader-worker and subprocess tracebacks, and stable failure signatures."""

from tools.trace.models import ExceptionInfo, Frame, Signature, TestOutcome, Trace
from tools.trace.parse import parse_trace, signature_for_status

__all__ = ["ExceptionInfo", "Frame", "Signature", "TestOutcome", "Trace", "parse_trace", "signature_for_status"]
