"""tpx's random number generators: counter-based, with CUDA's (seed, offset) Philox state.

Each tpx device has a default generator and ``torch.Generator(device="tpx")`` makes more; the
generators themselves are C++ (``tpx_ext.cpp``: ``get_state``/``set_state``/``clone_state``/
``graphsafe_*`` must be a ``GeneratorImpl``'s). Their state is 16 bytes, seed then offset as
uint64, which is what DTensor's RNG tracker (``torch.distributed.tensor._random``) and code that
reads CUDA's Philox state expect. Every random op on tpx draws from one generator (the op's
``generator=`` or the default generator of the op's device) and advances its offset by
``increment(numel)``: the element count of its largest result rounded up to a multiple of 4 (at
least 4), the unit DTensor also uses.

Which numbers an op gets (``rng_acquire`` in C++):

* **in step** (after ``manual_seed``, or after ``set_rng_state`` of a state this generator handed
  out in this process): the generator's CPU stream, the CPU default generator for the default
  generators (so a seeded tpx run matches the CPU run draw for draw, CPU and tpx draws
  interleaved) or a private one for ``torch.Generator(device="tpx")``;
* **counter mode** (any other state: DTensor's per-shard offsets, a state from another process
  or a checkpoint): numbers that depend on (seed, offset) only, the same in every run and rank.

This module is the ``torch.tpx`` RNG API (``manual_seed`` ... ``set_rng_state_all``) and the
helpers the kernels (``kernels.run_info``) call around a random op.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterable, Iterator

import torch

from . import _ext
from .devices import _index, device_count

logger = logging.getLogger(__name__)

# ops that draw from the CPU default generator without a Generator argument
HOST_RNG_OPS = frozenset({"native_dropout"})
_STATE_BYTES = 16
# TPX_RNG=host: the CPU default generator's state before and after the latest draw a tpx op took
# from it (see ``host_draw``)
_host_draw: list[torch.Tensor] = []


def default_generator(device=None) -> torch.Generator:
    """The default generator of a tpx device (None / "tpx": the current one)."""
    return _ext.get().default_generator(_index(device))


def _visible() -> range:
    return range(device_count())


# ---------------------------------------------------------------- the torch.tpx API
def manual_seed(seed: int) -> None:
    """Seed the current device's default generator (offset 0); as the default generators follow
    the host stream while in step, this seeds the CPU default generator too."""
    default_generator().manual_seed(int(seed))


def manual_seed_all(seed: int) -> None:
    for i in _visible():
        default_generator(i).manual_seed(int(seed))


def seed() -> None:
    default_generator().seed()


def seed_all() -> None:
    s = default_generator().seed()
    for i in _visible():
        default_generator(i).manual_seed(s)


def initial_seed() -> int:
    return int(default_generator().initial_seed())


def get_rng_state(device: int | str | torch.device = "tpx") -> torch.Tensor:
    """The default generator's state: 16 uint8 (seed, offset), CUDA's layout."""
    return default_generator(device).get_state()


def set_rng_state(new_state: torch.Tensor, device: int | str | torch.device = "tpx") -> None:
    if not isinstance(new_state, torch.Tensor) or new_state.dtype != torch.uint8 or new_state.numel() not in (
        _STATE_BYTES, 8
    ):
        what = (f"a {new_state.dtype} tensor of {new_state.numel()} elements" if isinstance(new_state, torch.Tensor)
                else type(new_state).__name__)
        raise ValueError(
            f"torch.tpx.set_rng_state: a tpx RNG state is a torch.uint8 tensor of {_STATE_BYTES} bytes (seed, "
            f"offset: CUDA's Philox layout), as torch.tpx.get_rng_state() returns it; got {what}. A CPU "
            "generator's state (torch.get_rng_state(), 5056 bytes) goes to torch.set_rng_state instead."
        )
    state = new_state.detach().to("cpu").contiguous()
    default_generator(device).set_state(state)
    if _host_draw:
        _keep_host_draw()


def host_mode() -> bool:
    """TPX_RNG=host: random ops draw from the CPU stream in program order, as a CPU run does."""
    from .config import get_config

    return get_config().rng == "host"


@contextlib.contextmanager
def host_draw(cpu: torch.Generator | None) -> Iterator[None]:
    """Around a random op under TPX_RNG=host that draws from the CPU default generator: remember the
    stream's state before and after it. DTensor runs its random ops inside ``torch.random.fork_rng``,
    which gives the CPU generator back its state on the way out, then sets the tpx state; a CPU run
    draws those numbers from the stream for good, so ``set_rng_state`` moves the stream past a draw
    that the fork's exit just took back (and only then)."""
    if cpu is not None or not host_mode():
        yield
        return
    before = torch.default_generator.get_state()
    yield
    _host_draw[:] = [before, torch.default_generator.get_state()]


def _keep_host_draw() -> None:
    before, after = _host_draw
    _host_draw.clear()
    if torch.equal(torch.default_generator.get_state(), before):
        torch.default_generator.set_state(after)


def get_rng_state_all() -> list[torch.Tensor]:
    return [get_rng_state(i) for i in _visible()]


def set_rng_state_all(new_states: Iterable[torch.Tensor]) -> None:
    for i, state in enumerate(new_states):
        set_rng_state(state, i)


# ---------------------------------------------------------------- around a random op
def increment(numel: int) -> int:
    """How far an op that produced ``numel`` random elements moves the offset."""
    return (max(int(numel), 1) + 3) // 4 * 4


def generator_for(arg: object, dev: int) -> torch.Generator | None:
    """The tpx generator an op with generator argument ``arg`` draws from (its own, or the default
    one of the op's device ``dev``: -1 current, -2 none named); None when ``arg`` is a CPU one."""
    if arg is None:
        return _ext.get().default_generator(dev if dev >= 0 else -1)
    if isinstance(arg, torch.Generator) and arg.device.type == "tpx":
        return arg
    return None


def acquire(gen: torch.Generator) -> torch.Generator | None:
    """The CPU generator the op runs on (None: the CPU default generator)."""
    cpu: torch.Generator | None = _ext.get().rng_acquire(gen)
    return cpu


def advance(gen: torch.Generator, out: object) -> None:
    _ext.get().rng_advance(gen, increment(_largest_numel(out)))


def _largest_numel(out: object) -> int:
    if isinstance(out, torch.Tensor):
        return out.numel()
    if isinstance(out, (tuple, list)):
        return max((_largest_numel(o) for o in out), default=0)
    return 0


@contextlib.contextmanager
def host_stream(cpu: torch.Generator | None) -> Iterator[None]:
    """For an op that draws from the CPU default generator itself (``HOST_RNG_OPS``): make that
    generator ``cpu``'s stream for the call, and give it back its own state afterwards."""
    if cpu is None:
        yield
        return
    host = torch.default_generator
    saved = host.get_state()
    host.set_state(cpu.get_state())
    try:
        yield
    finally:
        cpu.set_state(host.get_state())
        host.set_state(saved)
