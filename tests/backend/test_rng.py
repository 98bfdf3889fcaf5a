"""tpx's counter-based generators (issue 33 item 4): CUDA's 16-byte (seed, offset) Philox state,
replay through get/set_rng_state, fork_rng, the Generator API, DTensor random init."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn

import backend  # noqa: F401  (registers tpx)

_ROOT = Path(__file__).resolve().parents[2]


def _state(seed: int, offset: int) -> torch.Tensor:
    return torch.tensor([seed, offset], dtype=torch.int64).view(torch.uint8)


def _seed_offset(state: torch.Tensor) -> list[int]:
    return state.view(torch.int64).tolist()


def _increment(numel: int) -> int:
    """How far a random op moves the offset: its result's element count, rounded up to 4."""
    return (max(numel, 1) + 3) // 4 * 4


OPS = {
    "rand": lambda d: torch.rand(5, 3, device=d),
    "randn": lambda d: torch.randn(7, device=d),
    "randint": lambda d: torch.randint(0, 100, (9,), device=d),
    "randperm": lambda d: torch.randperm(10, device=d),
    "normal_": lambda d: torch.empty(6, device=d).normal_(),
    "uniform_": lambda d: torch.empty(2, 3, device=d).uniform_(-2, 2),
    "bernoulli_": lambda d: torch.empty(12, device=d).bernoulli_(0.3),
    "bernoulli": lambda d: torch.bernoulli(torch.full((5,), 0.5, device=d)),
    "dropout": lambda d: F.dropout(torch.ones(10, device=d), 0.5),
    "multinomial": lambda d: torch.multinomial(torch.ones(4, 6, device=d), 3),
    "exponential_": lambda d: torch.empty(5, device=d).exponential_(),
    "randn_like": lambda d: torch.randn_like(torch.empty(3, 3, device=d)),
    "normal_tensor": lambda d: torch.normal(torch.zeros(5, device=d), 1.0),
}


def test_state_is_cudas_philox_layout():
    torch.manual_seed(1234)
    state = torch.tpx.get_rng_state()
    assert state.dtype == torch.uint8 and state.device.type == "cpu" and state.numel() == 16
    assert _seed_offset(state) == [1234, 0] and torch.tpx.initial_seed() == 1234
    torch.randn(5, device="tpx")
    assert _seed_offset(torch.tpx.get_rng_state()) == [1234, 8]  # 5 numbers: the offset moves by 8
    # each device has its own generator
    assert _seed_offset(torch.tpx.get_rng_state(1)) == [1234, 0]
    assert len(torch.tpx.get_rng_state_all()) == torch.tpx.device_count()


@pytest.mark.parametrize("name", sorted(OPS))
def test_every_random_op_replays_and_advances_the_offset(name):
    op = OPS[name]
    for start in ("seeded", "counter"):
        if start == "seeded":
            torch.manual_seed(7)
        else:  # a state this process never handed out: (seed, offset) alone decide the numbers
            torch.tpx.set_rng_state(_state(99, 400))
        state = torch.tpx.get_rng_state()
        first = op("tpx").cpu()
        seed, offset = _seed_offset(torch.tpx.get_rng_state())
        assert [seed, offset] == [_seed_offset(state)[0], _seed_offset(state)[1] + _increment(first.numel())]
        torch.tpx.set_rng_state(state)
        assert torch.equal(op("tpx").cpu(), first), start
        if start == "seeded":  # in step with the host stream: the CPU's numbers
            torch.manual_seed(7)
            assert torch.equal(op("cpu"), first)


def test_counter_states_give_the_same_numbers_in_every_process():
    code = ("import torch, backend; torch.tpx.set_rng_state(torch.tensor([99, 400]).view(torch.uint8)); "
            "print(torch.randn(6, device='tpx').cpu().tolist())")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                         env={"PYTHONPATH": str(_ROOT), "PATH": "/usr/bin:/bin"}, check=True).stdout
    torch.tpx.set_rng_state(_state(99, 400))
    here = torch.randn(6, device="tpx").cpu().tolist()
    assert out.strip() == str(here)
    torch.tpx.set_rng_state(_state(99, 404))
    assert torch.randn(6, device="tpx").cpu().tolist() != here  # another offset, other numbers


def test_fork_rng_restores_the_tpx_state_set_inside():
    torch.manual_seed(3)
    outside = torch.tpx.get_rng_state(1)
    with torch.random.fork_rng(devices=[1], device_type="tpx"):
        torch.tpx.set_rng_state(_state(5, 64), 1)  # what DTensor's RNG tracker does
        inside = torch.randn(4, device="tpx:1").cpu()
        assert _seed_offset(torch.tpx.get_rng_state(1)) == [5, 68]
    assert torch.equal(torch.tpx.get_rng_state(1), outside)
    after = torch.randn(4, device="tpx:1").cpu()
    torch.tpx.set_rng_state(_state(5, 64), 1)
    assert torch.equal(torch.randn(4, device="tpx:1").cpu(), inside) and not torch.equal(after, inside)


def test_generator_api_like_cudas():
    g = torch.Generator(device="tpx").manual_seed(11)
    assert _seed_offset(g.get_state()) == [11, 0] and g.get_offset() == 0
    a = torch.rand(6, device="tpx", generator=g).cpu()
    assert g.get_offset() == 8
    assert torch.equal(a, torch.rand(6, generator=torch.Generator().manual_seed(11)))  # in step: the CPU's stream
    clone = g.clone_state()  # independent, draws what g would draw next
    assert torch.equal(torch.randn(3, device="tpx", generator=clone).cpu(),
                       torch.randn(3, device="tpx", generator=g).cpu())
    shared = g.graphsafe_get_state()  # the same state object
    torch.rand(2, device="tpx", generator=shared)
    assert g.get_offset() == shared.get_offset() == 16
    other = torch.Generator(device="tpx").manual_seed(5)
    g.graphsafe_set_state(other)
    assert _seed_offset(g.get_state()) == [5, 0]
    g.set_state(_state(2, 12))
    assert g.initial_seed() == 2 and g.get_offset() == 12
    with pytest.raises(RuntimeError, match="multiple of 4"):
        g.set_offset(6)


def test_set_rng_state_says_what_a_tpx_state_is():
    with pytest.raises(ValueError, match=r"16 bytes .* torch\.set_rng_state"):
        torch.tpx.set_rng_state(torch.get_rng_state())  # a CPU generator's state


@pytest.fixture
def mesh(tmp_path):
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import _random

    dist.init_process_group("tpxgloo", init_method=f"file://{tmp_path / 'rdzv'}", rank=0, world_size=1)
    yield init_device_mesh("tpx", (1,))
    _random._rng_tracker = None
    dist.destroy_process_group()


def test_dtensor_random_init_uses_the_offsets_dtensor_sets(mesh):
    from torch.distributed.tensor import Shard, _random, distribute_tensor

    def init() -> tuple[torch.Tensor, list[int], list[int]]:
        _random.manual_seed(5, mesh)
        dt = distribute_tensor(torch.empty(8, 6, device="tpx"), mesh, [Shard(0)])
        before = _seed_offset(torch.tpx.get_rng_state())
        nn.init.uniform_(dt, -1.0, 1.0)
        return dt.full_tensor().cpu(), before, _seed_offset(torch.tpx.get_rng_state())

    values, before, after = init()
    assert after == [5, before[1] + 48]  # DTensor moved the offset by the tensor's numel
    again, _, _ = init()
    assert torch.equal(values, again) and values.abs().max() <= 1.0 and values.unique().numel() > 40
    torch.tpx.set_rng_state(_state(*before))  # the one shard drew at DTensor's start offset
    assert torch.equal(torch.empty(8, 6, device="tpx").uniform_(-1.0, 1.0).cpu(), values)
