"""``backend.demo.run_demo`` and ``ferry demo``."""

from __future__ import annotations

import json

from agent.cli import main
from backend.demo import run_demo


def test_run_demo_trains_and_reports_placement():
    report = run_demo(steps=3)
    assert report["model"] and report["device"] == "tpx"
    assert len(report["losses"]) == 3 and all(isinstance(x, float) for x in report["losses"])
    where = {row["op"]: row["where"] for row in report["ops"]}
    assert where["aten::convolution"] == "tpx"
    assert where["aten::nonzero"] == "cpu-fallback"
    assert all(row["calls"] >= 1 for row in report["ops"])
    again = run_demo(steps=3)
    assert again["losses"] == report["losses"]  # seeded


def test_ferry_demo_json(capsys):
    assert main(["demo", "--steps", "2", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["device"] == "tpx" and len(data["losses"]) == 2


def test_ferry_demo_rejects_bad_steps(capsys):
    assert main(["demo", "--steps", "0"]) == 2
    assert "argument --steps: must be a whole number of 1 or more" in capsys.readouterr().err
