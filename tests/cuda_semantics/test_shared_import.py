"""cuda_semantics is what tpx and the CPU redirect share: importing it must not register tpx (a CPU
reference run imports it), and both sides use its one stand-in and its one cast policy."""

from __future__ import annotations

import os
import subprocess
import sys

import torch


def test_importing_the_shared_module_registers_no_device():
    code = ("import sys, torch, cuda_semantics.graphs, cuda_semantics.autocast\n"
            "print(hasattr(torch, 'tpx'), sorted(m for m in sys.modules if m.split('.')[0] in "
            "('backend', 'tools', 'agent', 'sandbox')))\n")
    env = {**os.environ, "TORCH_DEVICE_BACKEND_AUTOLOAD": "0"}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["False", "[]"], out.stderr


def test_tpx_and_the_redirect_replay_graphs_with_the_one_stand_in():
    from backend import graphs as tpx_graphs
    from cuda_semantics import graphs as shared
    from tools.redirect import graphs as redirect_graphs

    assert issubclass(tpx_graphs.Graph, shared.EagerGraph)
    assert issubclass(redirect_graphs._Graph, shared.EagerGraph)
    assert torch.tpx.is_current_stream_capturing is shared.is_current_stream_capturing


def test_cast_inputs_follows_cudas_policy_for_the_named_device_only():
    from cuda_semantics import autocast

    half = torch.ones(2, dtype=torch.float16)
    full = torch.ones(2)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        (low,), _ = autocast.cast_inputs("lower", "cpu", (full,), {})
    (up,), _ = autocast.cast_inputs("fp32", "cpu", (half,), {})
    (a, b), _ = autocast.cast_inputs("promote", "cpu", (half, full), {})
    (meta,), _ = autocast.cast_inputs("fp32", "cpu", (half.to("meta"),), {})
    assert (low.dtype, up.dtype, a.dtype, b.dtype) == (torch.bfloat16, torch.float32, torch.float32, torch.float32)
    assert meta.dtype == torch.float16  # another device's tensor is left as it is
    assert {"mm.default", "softmax.int", "cat.default"} <= {q for q, _, _ in autocast.policy_ops()}
