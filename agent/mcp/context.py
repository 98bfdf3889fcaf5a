"""What one MCP tool call runs with: who called, over which transport, the server's limits, how to report
progress and how to know it was cancelled."""

from __future__ import annotations

import hashlib
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, Field

from agent.service.settings import ServiceSettings
from agent.service.store import SessionStore
from agent.service.workers import Workers

Transport = Literal["stdio", "http"]
Progress = Callable[[float, str], None]


class McpLimits(BaseModel):
    """The server's limits on what one client may ask of it."""

    call_timeout_s: float = Field(default=1800.0, gt=0, description="longest a tool call may take")
    run_timeout_s: float = Field(default=900.0, gt=0, description="longest one sandboxed run may take")
    concurrent_runs: int = Field(default=2, ge=1, description="run/check/profile calls in flight per client")
    max_text_chars: int = Field(default=20_000, ge=1000, description="text returned in one tool result; the "
                                                                     "whole result stays readable as a resource")


@dataclass
class Server:
    """The service's parts the MCP door runs over (the same store and workers as ``ferry serve``)."""

    settings: ServiceSettings
    store: SessionStore
    workers: Workers
    transport: Transport
    limits: McpLimits = field(default_factory=McpLimits)
    cwd: Path = field(default_factory=Path.cwd)

    def calls_dir(self, owner: str) -> Path:
        """Where an owner's call results and test baselines are kept (a name no owner chooses)."""
        return self.calls_dir_of(self.settings.data_dir, owner)

    @staticmethod
    def calls_dir_of(data_dir: Path, owner: str) -> Path:
        return data_dir / "mcp" / hashlib.sha256(owner.encode()).hexdigest()[:24]


@dataclass
class Call:
    """One tool call: its caller and its server, its progress callback and its cancel event."""

    server: Server
    owner: str
    progress: Progress = lambda fraction, message: None
    cancel: threading.Event = field(default_factory=threading.Event)
