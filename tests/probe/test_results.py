"""Tensors a program saves (torch.save, numpy.save/savez) and its final top-level tensors are recorded."""

from __future__ import annotations

import io
import sys
import types
from pathlib import Path

import numpy as np
import pytest
import torch

from tools.probe.child import probe_session
from tools.probe.dump import ProbeDump
from tools.probe.results import MAX_FINAL_NAMES, SAVES_PER_FILE


@pytest.fixture
def workdir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A run's working directory (its saves are keyed relative to it) and an empty ``__main__``."""
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.chdir(work)
    monkeypatch.delenv("FERRY_WORKSPACE", raising=False)
    monkeypatch.setitem(sys.modules, "__main__", types.ModuleType("__main__"))
    return work


def test_torch_save_records_every_tensor_under_its_relative_path(workdir: Path, tmp_path: Path) -> None:
    (workdir / "out").mkdir()
    state = {"model": {"w": torch.arange(4.0), "b": torch.ones(2)}, "step": 3, "name": "x"}
    with probe_session(tmp_path / "dump", steps=0):
        torch.save(state, "out/ckpt.pt")
        torch.save(torch.full((3,), 2.0), workdir / "out" / "ckpt.pt")  # the same file again: call 1
        torch.serialization.save(torch.zeros(1), "z.pt")
    dump = ProbeDump(tmp_path / "dump")
    assert sorted(dump.tensor_events) == ["saved:out/ckpt.pt:obj#1", "saved:out/ckpt.pt:obj['model']['b']#0",
                                          "saved:out/ckpt.pt:obj['model']['w']#0", "saved:z.pt:obj#0"]
    assert torch.equal(dump.tensor("saved:out/ckpt.pt:obj['model']['w']#0"), torch.arange(4.0))
    assert torch.equal(dump.tensor("saved:out/ckpt.pt:obj#1"), torch.full((3,), 2.0))
    assert dump.tensor_events["saved:z.pt:obj#0"]["kind"] == "saved"
    assert torch.load(workdir / "out" / "ckpt.pt").tolist() == [2.0, 2.0, 2.0]  # the save itself happened


def test_wrapped_save_keeps_identity_and_is_removed_after(workdir: Path, tmp_path: Path) -> None:
    original, np_original = torch.save, np.save
    with probe_session(tmp_path / "dump", steps=0):
        assert torch.save is not original and torch.save is torch.serialization.save
        assert torch.save.__name__ == "save" and torch.save.__doc__ == original.__doc__
        assert torch.save.__wrapped__ is original and torch.save.__module__ == original.__module__
        assert np.save.__name__ == "save" and np.save.__wrapped__ is np_original
    assert torch.save is original and torch.serialization.save is original and np.save is np_original


def test_buffers_temp_files_and_compiled_code_are_not_recorded(workdir: Path, tmp_path: Path,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    import tempfile

    buf = io.BytesIO()
    with probe_session(tmp_path / "dump", steps=0):
        torch.save(torch.ones(2), buf)
        with tempfile.NamedTemporaryFile(suffix=".pt", dir=tempfile.gettempdir()) as f:
            if not f.name.startswith(str(workdir)):
                torch.save(torch.ones(2), f.name)
        monkeypatch.setattr(torch.compiler, "is_compiling", lambda: True)
        torch.save(torch.ones(2), "compiled.pt")
        monkeypatch.undo()
    assert buf.getvalue() and (workdir / "compiled.pt").exists()
    assert ProbeDump(tmp_path / "dump").tensor_events == {}


def test_a_failing_save_raises_as_before_and_records_nothing(workdir: Path, tmp_path: Path) -> None:
    with probe_session(tmp_path / "dump", steps=0), pytest.raises((FileNotFoundError, RuntimeError)):
        torch.save(torch.ones(2), "no/such/dir/x.pt")
    assert ProbeDump(tmp_path / "dump").tensor_events == {}


def test_saves_of_one_file_are_bounded_and_a_large_save_does_not_stop_the_recording(workdir: Path,
                                                                                    tmp_path: Path) -> None:
    with probe_session(tmp_path / "dump", steps=0, max_bytes=4096):
        for i in range(SAVES_PER_FILE + 3):
            torch.save(torch.full((2,), float(i)), "every_epoch.pt")
        torch.save(torch.zeros(10_000), "big.pt")  # over the budget: listed without data
        torch.save(torch.ones(3), "after.pt")
    dump = ProbeDump(tmp_path / "dump")
    assert [k for k in dump.tensor_events if k.startswith("saved:every_epoch.pt")] == [
        f"saved:every_epoch.pt:obj#{i}" for i in range(SAVES_PER_FILE)]
    assert "byte budget" in dump.tensor_events["saved:big.pt:obj#0"]["skipped"]
    assert dump.tensor("saved:big.pt:obj#0") is None
    assert torch.equal(dump.tensor("saved:after.pt:obj#0"), torch.ones(3))
    assert "stopped" not in dump.meta


def test_numpy_saves_are_recorded(workdir: Path, tmp_path: Path) -> None:
    with probe_session(tmp_path / "dump", steps=0):
        np.save("field", np.arange(3.0))
        np.savez("fields.npz", np.ones(2), u=np.zeros((2, 2), dtype=np.float32))
        torch.save({"a": np.array([1, 2])}, "mixed.pt")
    dump = ProbeDump(tmp_path / "dump")
    assert torch.equal(dump.tensor("saved:field.npy:obj#0"), torch.arange(3.0, dtype=torch.float64))
    assert torch.equal(dump.tensor("saved:fields.npz:obj['arr_0']#0"), torch.ones(2, dtype=torch.float64))
    assert dump.tensor_events["saved:fields.npz:obj['u']#0"]["dtype"] == "float32"
    assert dump.tensor("saved:mixed.pt:obj['a']#0").tolist() == [1, 2]
    assert np.load("fields.npz")["u"].shape == (2, 2)


def test_keys_are_relative_to_the_workspace(workdir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (workdir / "sub").mkdir()
    monkeypatch.setenv("FERRY_WORKSPACE", str(workdir))
    monkeypatch.chdir(workdir / "sub")
    with probe_session(tmp_path / "dump", steps=0):
        torch.save(torch.ones(1), "../results.pt")
    assert list(ProbeDump(tmp_path / "dump").tensor_events) == ["saved:results.pt:obj#0"]


def test_final_top_level_tensors_are_recorded_at_close(workdir: Path, tmp_path: Path) -> None:
    main = sys.modules["__main__"]
    with probe_session(tmp_path / "dump", steps=0):
        main.u = torch.zeros(3)
        main.u += 1  # the value at exit counts
        main._private = torch.ones(2)
        main.arr = np.full(2, 7.0)
        main.torch, main.Module, main.fn, main.n = torch, torch.nn.Module, len, 5
    dump = ProbeDump(tmp_path / "dump")
    assert list(dump.tensor_events) == ["final:u", "final:arr"]
    assert torch.equal(dump.tensor("final:u"), torch.ones(3))
    assert dump.tensor_events["final:u"]["kind"] == "final"
    assert dump.tensor("final:arr").tolist() == [7.0, 7.0]


def test_final_tensors_are_bounded_and_can_be_switched_off(workdir: Path, tmp_path: Path) -> None:
    main = sys.modules["__main__"]
    for i in range(MAX_FINAL_NAMES + 10):
        setattr(main, f"x{i}", torch.tensor(float(i)))
    with probe_session(tmp_path / "a", steps=0):
        pass
    assert len(ProbeDump(tmp_path / "a").tensor_events) == MAX_FINAL_NAMES
    with probe_session(tmp_path / "b", steps=0, record_final=False, record_saves=False):
        torch.save(torch.ones(1), "off.pt")
    assert ProbeDump(tmp_path / "b").tensor_events == {}
