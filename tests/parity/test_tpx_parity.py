"""Real drift on the tpx device: bf16 matmul operands are detected, attributed, and fixed by 'highest'."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.parity.conftest import tpx_or_skip, train_probed
from tools.parity.compare import compare_dumps


@pytest.fixture
def tpx_precision():
    tpx_or_skip()
    import backend

    before = backend.get_config().matmul_precision
    yield backend.configure
    backend.configure(matmul_precision=before)


def test_bf16_matmul_on_tpx_is_detected_and_attributed(reference_dump: Path, tmp_path: Path, tpx_precision) -> None:
    tpx_precision(matmul_precision="bf16")
    report = compare_dumps(reference_dump, train_probed(tmp_path / "tpx", device="tpx"))
    assert report.verdict == "fail"
    div = report.first_divergence
    assert div is not None
    assert (div.module, div.step, div.inputs) == ("Model.embed", 0, "pass")  # the first Linear of the model
    assert div.likely_cause == "matmul_precision" and "bf16" in div.explanation
    assert div.output.target_device.startswith("tpx") and div.output.tolerances.dtype == "float32"


def test_tpx_with_highest_precision_passes(reference_dump: Path, tmp_path: Path, tpx_precision) -> None:
    tpx_precision(matmul_precision="highest")
    report = compare_dumps(reference_dump, train_probed(tmp_path / "tpx", device="tpx"))
    assert report.verdict == "pass", report.summary
    assert report.first_divergence is None
    assert report.counts["compared"] > 50 and all(t.target_device.startswith("tpx")
                                                  for t in report.tensors if t.kind == "module_output")
