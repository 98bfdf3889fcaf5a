"""Distributed runs: parity compares rank 0; the ranks must agree where the reference's ranks agree."""

from __future__ import annotations

from pathlib import Path

from tools.parity.compare import compare_dumps
from tools.parity.ranks import rank_agreement, rank_dumps
from tools.probe.config import ProbeConfig
from tools.probe.recorder import Recorder


def _dump(path: Path, scalars: dict[str, list[float]]) -> None:
    rec = Recorder(ProbeConfig(out_dir=path))
    for name, values in scalars.items():
        for v in values:
            rec.add_scalar(name, v)
    rec.close()


def _run(root: Path, ranks: list[dict[str, list[float]]]) -> Path:
    for rank, scalars in enumerate(ranks):
        _dump(root if rank == 0 else root / f"rank-{rank}", scalars)
    return root


def test_ranks_must_agree_where_the_reference_ranks_agree(tmp_path: Path):
    # "loss" is all-reduced (the same on every rank), "local" is each rank's own
    ref = _run(tmp_path / "ref", [{"loss": [1.0, 0.5], "local": [1.1, 0.6]}, {"loss": [1.0, 0.5], "local": [0.9, 0.4]}])
    good = _run(tmp_path / "good", [{"loss": [1.0, 0.5], "local": [1.1, 0.6]},
                                    {"loss": [1.0, 0.5], "local": [0.8, 0.3]}])
    bad = _run(tmp_path / "bad", [{"loss": [1.0, 0.5], "local": [1.1, 0.6]}, {"loss": [1.0, 0.7], "local": [0.9, 0.4]}])
    assert sorted(rank_dumps(good)) == [0, 1]
    ok = rank_agreement(ref, good)
    assert ok.ranks == 2 and ok.checked == ["loss"] and not ok.disagreeing
    assert "distributed run: parity compares rank 0 of 2 ranks" in ok.notes()
    broken = rank_agreement(ref, bad)
    assert broken.disagreeing == {"loss": "value 1: rank 0 0.5, rank 1 0.7"}
    assert compare_dumps(ref, good).verdict == "pass"  # rank 0 matches; "local" differs by rank, as it must
    report = compare_dumps(ref, bad)
    assert report.verdict == "fail" and "ranks disagree on loss" in report.summary


def test_a_single_process_run_has_no_rank_checks(tmp_path: Path):
    ref = _run(tmp_path / "ref", [{"loss": [1.0]}])
    tgt = _run(tmp_path / "tgt", [{"loss": [1.0]}])
    (tgt / "rank-x").mkdir()  # not a rank directory
    agreement = rank_agreement(ref, tgt)
    assert agreement.ranks == 1 and agreement.notes() == []
    assert not any("distributed" in n for n in compare_dumps(ref, tgt).notes)
