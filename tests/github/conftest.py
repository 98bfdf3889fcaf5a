"""The GitHub tests' fixtures: a fake GitHub API on loopback (fake_github.py), and the service's
real-server helper (tests/service/service_client.py)."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))
sys.path.insert(0, str(Path(__file__).parents[1] / "service"))

from fake_github import FakeGitHub


@pytest.fixture
def fake_github() -> Iterator[FakeGitHub]:
    fake = FakeGitHub()
    yield fake
    fake.close()
