"""The service tests' fixture: ``serve(*flags)`` starts a real server (service_client.Server)."""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))

from service_client import Server


@pytest.fixture
def serve(tmp_path: Path) -> Iterator[Callable[..., Server]]:
    """``serve(*flags)``: a server on ``tmp_path/data``; every one started is killed at the end."""
    started: list[Server] = []

    def start(*flags: str, data_dir: Path | None = None, env: dict[str, str] | None = None) -> Server:
        server = Server(data_dir or tmp_path / "data", *flags, env=env)
        started.append(server)
        return server

    yield start
    for server in started:
        server.kill()
