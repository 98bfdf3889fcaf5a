"""Shared fixtures for the tpx backend tests (every check compares against the CPU)."""

from __future__ import annotations

import dataclasses

import pytest
import torch

import backend
from backend import config, stats


@pytest.fixture
def tpx_config():
    """Yields ``backend.configure``; restores the settings afterwards."""
    saved = dataclasses.asdict(config.get_config())
    yield backend.configure
    backend.configure(**saved)


@pytest.fixture
def fresh_stats():
    stats.reset()
    yield stats
    stats.reset()


@pytest.fixture
def highest_precision():
    prev = torch.get_float32_matmul_precision()
    torch.set_float32_matmul_precision("highest")
    yield
    torch.set_float32_matmul_precision(prev)
