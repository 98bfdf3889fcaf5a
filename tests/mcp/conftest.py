"""The MCP tests' fixtures: a small CUDA repository that migrates with codemods only, and the service's
real-server helper (tests/service/service_client.py) for the HTTP transport."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "service"))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from mcp_sample import write_sample


@pytest.fixture
def sample(tmp_path: Path) -> Path:
    return write_sample(tmp_path)


@pytest.fixture
def serve(tmp_path: Path):
    """``serve(*flags)``: a real `ferry serve` (tokens for alice and bob) on ``tmp_path/data``; killed at the end."""
    from service_client import Server

    started: list[Server] = []

    def start(*flags: str) -> Server:
        server = Server(tmp_path / "data", *flags)
        started.append(server)
        return server

    yield start
    for server in started:
        server.kill()
