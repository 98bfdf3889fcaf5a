"""FRY019/FRY042 with the default device-generic output: what is rewritten, what stays review."""

from __future__ import annotations

import pytest

from tools.codemods.engine import analyze

PAIR = """import torch
x = torch.ones(4).cuda()
start = torch.cuda.Event(enable_timing=True)
end = torch.cuda.Event(enable_timing=True)
start.record()
end.record()
{use}
"""


def _rule(src: str, rule: str, device: str = "accelerator"):
    out = analyze(src, device_mode=device)
    return out, [f for f in out.findings if f.rule_id == rule]


def test_timing_pair_becomes_host_timing_and_compiles():
    out, found = _rule(PAIR.format(use="ms = start.elapsed_time(end)\nscaled = 2 ** start.elapsed_time(end)"),
                       "FRY019")
    assert {f.category for f in found} == {"auto"}
    assert "torch.cuda.Event" not in out.new_source and "import time" in out.new_source
    assert "ms = (end - start) * 1000\n" in out.new_source
    assert "scaled = 2 ** ((end - start) * 1000)\n" in out.new_source  # precedence kept
    ns: dict = {}
    exec(compile(out.new_source, "pair", "exec"), ns)  # runs on CPU
    assert ns["ms"] >= 0


@pytest.mark.parametrize("use,why", [
    ("def f(e):\n    return e\nf(start)\nprint(start.elapsed_time(end))", "used as a value"),
    ("if True: start.record()\nprint(start.elapsed_time(end))", "not a statement on its own line"),
    ("def tick():\n    start.record()\ntick()\nprint(start.elapsed_time(end))", "in another function"),
    ("print(start.elapsed_time(end), start.query())", "has no host-timing equivalent"),
    ("start = torch.cuda.Event(enable_timing=True)\nprint(start.elapsed_time(end))", "assigned more than once"),
    ("print(start.elapsed_time(torch.cuda.Event(enable_timing=True)))", "something other than an event"),
])
def test_unsafe_timing_uses_stay_review_with_the_reason(use, why):
    out, found = _rule(PAIR.format(use=use), "FRY019")
    start = [f for f in found if f.line == 3]  # `start = torch.cuda.Event(enable_timing=True)`
    assert len(start) == 1 and start[0].category == "review"
    assert why in start[0].message and "CPU has no timing events" in start[0].message
    assert "start = torch.cuda.Event(enable_timing=True)" in out.new_source
    assert "start.record()" in out.new_source


def test_time_name_bound_to_something_else_stays_review():
    src = "from time import time\n" + PAIR.format(use="print(start.elapsed_time(end), time())")
    _, found = _rule(src, "FRY019")
    assert found and all(f.category == "review" and "`time`" in f.message for f in found)


def test_plain_event_uses_the_device_module_and_tpx_mode_is_unchanged():
    src = "import torch as T\ne = T.cuda.Event()\ne.record()\n"
    out, found = _rule(src, "FRY019")
    assert [f.category for f in found] == ["auto"]
    assert "e = T.get_device_module(device).Event()\n" in out.new_source
    out, _ = _rule(PAIR.format(use="print(start.elapsed_time(end))"), "FRY019", device="tpx")
    assert "start = torch.Event(device=device, enable_timing=True)" in out.new_source
    assert "start.record()" in out.new_source


PROFILE = """import torch
import torch.profiler as tp
x = torch.ones(2).cuda()
{code}
"""


def test_profiler_activity_in_literals_is_generic_and_elsewhere_review():
    out, found = _rule(PROFILE.format(code="a = {tp.ProfilerActivity.CPU, tp.ProfilerActivity.CUDA}\n"
                                           "b = [tp.ProfilerActivity.CUDA]\n"
                                           "c = [tp.ProfilerActivity.CPU]\nc.append(tp.ProfilerActivity.CUDA)"),
                       "FRY042")
    assert [f.category for f in found] == ["auto", "auto", "review"]
    assert ("a = {tp.ProfilerActivity.CPU, *({getattr(tp.ProfilerActivity, device.type.upper(), "
            "tp.ProfilerActivity.CPU)} - {tp.ProfilerActivity.CPU})}") in out.new_source
    assert "b = [getattr(tp.ProfilerActivity, device.type.upper(), tp.ProfilerActivity.CPU)]" in out.new_source
    assert "c.append(tp.ProfilerActivity.CUDA)" in out.new_source
    assert "given twice" in found[2].message
    ns: dict = {}
    exec(compile(out.new_source.replace("c.append", "c.count"), "prof", "exec"), ns)
    import torch
    from torch.profiler import ProfilerActivity

    acc = torch.accelerator.current_accelerator(check_available=True)  # tpx when its backend is loaded
    mine = getattr(ProfilerActivity, acc.type.upper()) if acc is not None else ProfilerActivity.CPU
    assert ns["a"] == {ProfilerActivity.CPU, mine} and ns["b"] == [mine]


def test_profiler_activity_tpx_mode_still_uses_privateuse1():
    out, _ = _rule(PROFILE.format(code="acts = [tp.ProfilerActivity.CUDA]"), "FRY042", device="tpx")
    assert "acts = [tp.ProfilerActivity.PrivateUse1]" in out.new_source
