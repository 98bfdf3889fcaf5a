"""The profile's device-work counts: how many aten ops ran on tpx, of all the ops the run dispatched."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from tests.profile import sample_loop
from tools.profile.child import PROFILE_JSON, profile_session
from tools.profile.report import ProfileError, build_profile_report, read_device_work

HERE = Path(__file__).resolve().parent


@pytest.fixture
def tpx() -> str:
    try:
        torch.empty(1, device="tpx")
    except (RuntimeError, ImportError) as exc:
        pytest.skip(f"tpx device unavailable: {exc}")
    return "tpx"


def test_a_loop_on_tpx_does_most_of_its_ops_there(tmp_path: Path, tpx: str) -> None:
    with profile_session(tmp_path, HERE, warmup_steps=1, steps=2, trace=False):
        sample_loop.train(tpx, steps=6)
    work = read_device_work(tmp_path)
    assert work.scope == "through_window"
    assert work.tpx_ops > 0 and work.total_ops > work.tpx_ops  # randn on CPU then .to(): host ops too
    assert work.tpx_share is not None and work.tpx_share >= 0.6, work  # above DEVICE_SHARE_MIN
    assert work.run_tpx_ops >= work.tpx_ops  # tpx's own count covers the whole run, past the window
    assert build_profile_report(tmp_path, HERE).device_work == work
    # the model's compute (Linear: addmm forward, mm backward) all ran on tpx
    assert work.compute_ops >= 2 * 3 and work.compute_tpx_ops == work.compute_ops and work.compute_share == 1.0


def test_compute_ops_say_where_the_model_ran_whatever_the_host_does(tmp_path: Path, tpx: str) -> None:
    """A host-heavy loop (data made and reduced on CPU every step) whose model is on tpx: most of its
    ops are host ops, all of its compute ops are tpx ops; the same loop with the model on CPU has none."""
    def loop(device: str) -> None:
        torch.manual_seed(0)
        model = torch.nn.Linear(8, 2).to(device)
        for _ in range(4):
            raw = torch.randn(64, 8)
            for _ in range(10):  # host-side preprocessing
                raw = (raw - raw.mean(0)) / (raw.std(0) + 1e-6)
            model(raw[:16].to(device)).sum().backward()

    for device, out in ((tpx, tmp_path / "tpx"), ("cpu", tmp_path / "cpu")):
        with profile_session(out, HERE, warmup_steps=1, steps=2, trace=False):
            loop(device)
    on_tpx, on_cpu = read_device_work(tmp_path / "tpx"), read_device_work(tmp_path / "cpu")
    assert on_tpx.tpx_share is not None and on_tpx.tpx_share < 0.5, on_tpx  # the host's ops dominate
    assert on_tpx.compute_ops > 0 and on_tpx.compute_share == 1.0, on_tpx
    assert on_cpu.compute_ops > 0 and on_cpu.compute_tpx_ops == 0 and on_cpu.compute_share == 0.0, on_cpu


def test_an_embedding_model_without_matmuls_counts_its_lookups_and_loss(tmp_path: Path, tpx: str) -> None:
    """A bigram language model: an embedding and a cross-entropy, batches sliced out of a corpus on the host."""
    torch.manual_seed(0)
    corpus = torch.randint(0, 16, (400,))
    table = torch.nn.Embedding(16, 16).to(tpx)
    with profile_session(tmp_path, HERE, warmup_steps=1, steps=2, trace=False):
        for _ in range(4):
            ix = torch.randint(0, 390, (8,))
            x = torch.stack([corpus[i:i + 8] for i in ix]).to(tpx)
            y = torch.stack([corpus[i + 1:i + 9] for i in ix]).to(tpx)
            torch.nn.functional.cross_entropy(table(x).view(-1, 16), y.view(-1)).backward()
    work = read_device_work(tmp_path)
    assert work.compute_ops > 0 and work.compute_share == 1.0, work


def test_a_loop_on_cpu_does_no_tpx_ops(tmp_path: Path, tpx: str) -> None:
    with profile_session(tmp_path, HERE, warmup_steps=1, steps=2, trace=False):
        sample_loop.train("cpu", steps=6)
    work = read_device_work(tmp_path)
    assert work.tpx_ops == 0 and work.total_ops > 50 and work.tpx_share == 0.0, work


def test_counting_stops_with_the_window(tmp_path: Path, tpx: str) -> None:
    """The counter's cost is bounded by the profiled window: later steps are not counted."""
    counts = []
    for steps in (6, 12):
        out = tmp_path / str(steps)
        with profile_session(out, HERE, warmup_steps=1, steps=2, trace=False):
            sample_loop.train(tpx, steps=steps)
        counts.append(read_device_work(out).total_ops)
    assert counts[0] == counts[1] > 0


def test_a_program_without_steps_is_counted_over_the_whole_run(tmp_path: Path, tpx: str) -> None:
    with profile_session(tmp_path, HERE, warmup_steps=1, steps=2, trace=False):
        x = torch.arange(6, dtype=torch.float32).to(tpx)
        for i in range(5):
            (x + i).sum().item()
    work = read_device_work(tmp_path)
    assert work.scope == "run" and work.tpx_ops >= 10 and work.tpx_share is not None and work.tpx_share > 0.5


@pytest.mark.parametrize("forged", [{"device_ops": {"tpx": -1, "other": 3}},
                                    {"device_ops": {"tpx": "many"}},
                                    {"device_ops_scope": "../../etc"}])
def test_forged_counts_are_a_clear_error(tmp_path: Path, forged: dict) -> None:
    (tmp_path / PROFILE_JSON).write_text(json.dumps({"format": "ferry-profile/1", **forged}))
    with pytest.raises(ProfileError, match="device_ops"):
        read_device_work(tmp_path)


def test_a_compiled_model_on_tpx_counts_its_compute_as_tpx_work(tmp_path: Path, tpx: str,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    """A tpx compiled graph runs on CPU views of its tpx inputs: the matmuls Inductor calls meanwhile are
    tpx's work (they counted as CPU ops, and a compiled training run on tpx ended 'partial': "0 of its 12
    compute ops on tpx"). The same compiled model on CPU still counts none."""
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(tmp_path / "inductor"))

    def loop(device: str) -> None:
        torch.manual_seed(0)
        model = torch.compile(torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.GELU(), torch.nn.Linear(16, 1)))
        model.to(device)
        for _ in range(4):
            model(torch.randn(16, 8).to(device)).sum().backward()

    for device, out in ((tpx, tmp_path / "tpx"), ("cpu", tmp_path / "cpu")):
        torch.compiler.reset()
        with profile_session(out, HERE, warmup_steps=1, steps=2, trace=False):
            loop(device)
    on_tpx, on_cpu = read_device_work(tmp_path / "tpx"), read_device_work(tmp_path / "cpu")
    assert on_tpx.compute_ops > 0 and on_tpx.compute_share == 1.0, on_tpx
    assert on_cpu.compute_ops > 0 and on_cpu.compute_tpx_ops == 0, on_cpu
