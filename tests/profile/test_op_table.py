"""The profile window's op table is what ``torch.profiler``'s ``key_averages()`` tabulates, read from the
profiler's events without building its Python event objects (tools/profile/child.py::_rows_from_events):
1-1.5 s less per profiled run of a small LSTM trainer, on the run's way to its end."""

from __future__ import annotations

import threading

import pytest
import torch

from tools.profile.child import _op_table, _rows_from_events


def _lstm_steps() -> None:
    torch.manual_seed(0)
    net = torch.nn.LSTM(8, 16, num_layers=2)
    head = torch.nn.Linear(16, 4)
    opt = torch.optim.SGD([*net.parameters(), *head.parameters()], lr=0.1)
    x = torch.randn(12, 3, 8)
    for _ in range(2):
        out, _ = net(x)
        loss = torch.nn.functional.cross_entropy(head(out[-1]), torch.tensor([0, 1, 2]))
        opt.zero_grad()
        loss.backward()
        opt.step()


def _nested_ranges_and_a_thread() -> None:
    """User ranges (one inside a namesake: torch folds a lone child named as its parent), ops on another
    thread, a record_function opened on one thread and closed on another (async)."""
    a = torch.randn(32, 32)
    with torch.profiler.record_function("outer"):
        with torch.profiler.record_function("outer"):
            torch.mm(a, a)
        with torch.profiler.record_function("block"):
            for _ in range(3):
                (a * 2).sum()

    def work() -> None:
        with torch.profiler.record_function("worker"):
            torch.relu(a @ a)

    t = threading.Thread(target=work)
    t.start()
    t.join()


@pytest.mark.parametrize("program", [_lstm_steps, _nested_ranges_and_a_thread])
def test_the_op_table_is_key_averages_table(program) -> None:
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
        program()
    rows = _rows_from_events(prof)
    assert rows is not None
    expected = {e.key: (int(e.count), float(e.self_cpu_time_total), float(e.cpu_time_total))
                for e in prof.key_averages()}
    got = {r["op"]: (r["count"], r["self_cpu_us"], r["cpu_total_us"]) for r in rows}
    assert set(got) == set(expected)
    for op, (count, self_us, total_us) in expected.items():
        assert got[op][0] == count, op
        assert got[op][1] == pytest.approx(self_us, rel=1e-9, abs=1e-6), op
        assert got[op][2] == pytest.approx(total_us, rel=1e-9, abs=1e-6), op
    assert all(r["device_us"] == 0.0 for r in rows)
    table = _op_table(prof)  # the profile's rows: by self CPU time
    assert [r["self_cpu_us"] for r in table] == sorted((r["self_cpu_us"] for r in table), reverse=True)


def test_a_profiler_that_cannot_be_read_directly_falls_back_to_key_averages() -> None:
    class Stub:
        profiler = None

        def key_averages(self):
            raise AssertionError("not reached")

    assert _rows_from_events(Stub()) is None  # type: ignore[arg-type]
