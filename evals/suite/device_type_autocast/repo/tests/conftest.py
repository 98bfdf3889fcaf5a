import runpy
import sys

import pytest


@pytest.fixture
def run_train(monkeypatch):
    """Run train.py as `python train.py ARGS...` would, and return its globals."""

    def run(*args):
        monkeypatch.setattr(sys, "argv", ["train.py", *args])
        return runpy.run_path("train.py", run_name="__main__")

    return run
