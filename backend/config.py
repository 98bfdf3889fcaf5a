"""tpx settings: defaults, ``TPX_*`` environment variables and ``backend.configure(...)``."""

from __future__ import annotations

import dataclasses
import logging
import os
import re

logger = logging.getLogger(__name__)

# Ops whose output shape depends on the data: a real accelerator cannot size their outputs
# without a device-to-host sync, so tpx runs them as counted CPU fallbacks (or refuses, strict).
DEFAULT_FALLBACK_OPS: frozenset[str] = frozenset(
    {
        "nonzero",
        "nonzero_static",
        "unique",
        "_unique",
        "_unique2",
        "unique_dim",
        "unique_consecutive",
        "unique_dim_consecutive",
        "masked_select",
        "masked_scatter",
        "bincount",
        "histc",
        "repeat_interleave",
        "argwhere",
        "_assert_async",
    }
)

MATMUL_PRECISIONS = ("auto", "highest", "bf16")
# TPX_RNG: "device" (counter-based Philox, like a real chip: DTensor's per-shard offsets give the
# numbers an unsharded draw would) or "host" (each op draws from the CPU stream in program order, as
# a CPU run does: what parity's RNG-alignment side run uses to tell init draws from real divergence)
RNG_MODES = ("device", "host")
# TPX_AUTOCAST: "on" (torch.autocast("tpx") casts by CUDA's policy) or "off" (autocast regions compute
# in the dtypes their inputs have, as the fp32 golden run of the original does with CUDA's autocast)
AUTOCAST_MODES = ("on", "off")

# The tpx backend reads its TPX_* settings itself rather than with Ferry's env helper
# (sandbox.envvars): backend imports nothing of Ferry's (it is the device, loaded into user programs
# by torch's autoload and inside every sandboxed tpx run), and sandbox, which imports the standard
# library only, cannot use a reader of backend's either. Its spellings are its own: sizes in any
# case with optional B/iB (16GiB, 512mb), yes/no flags that refuse other words.
_UNITS = {"": 1, "b": 1, "k": 1 << 10, "kb": 1 << 10, "kib": 1 << 10, "m": 1 << 20, "mb": 1 << 20,
          "mib": 1 << 20, "g": 1 << 30, "gb": 1 << 30, "gib": 1 << 30, "t": 1 << 40, "tb": 1 << 40,
          "tib": 1 << 40}


def parse_bytes(value: str | int) -> int:
    """``16GiB``, ``512M``, ``1048576`` -> bytes (binary units)."""
    if isinstance(value, int):
        if value <= 0:
            raise ValueError(f"memory capacity must be positive, got {value}")
        return value
    m = re.fullmatch(r"\s*([0-9]+(?:\.[0-9]+)?)\s*([a-zA-Z]*)\s*", str(value))
    if not m or m.group(2).lower() not in _UNITS:
        raise ValueError(f"cannot read a memory size from {value!r}; use e.g. 16GiB, 512MiB or a byte count")
    n = int(float(m.group(1)) * _UNITS[m.group(2).lower()])
    if n <= 0:
        raise ValueError(f"memory capacity must be positive, got {value!r}")
    return n


def _env_bool(name: str, default: bool) -> bool:
    raw = os.environ.get(name)
    if raw is None or raw == "":
        return default
    if raw.lower() in ("1", "true", "yes", "on"):
        return True
    if raw.lower() in ("0", "false", "no", "off"):
        return False
    raise ValueError(f"{name}={raw!r}: use 1/0, true/false, yes/no or on/off")


@dataclasses.dataclass(frozen=True)
class TpxConfig:
    """Everything configurable about the simulated chip."""

    memory_capacity: int = 16 << 30  # TPX_MEMORY_CAPACITY, bytes or "16GiB"
    strict: bool = False  # TPX_STRICT: fallback ops raise NotImplementedError instead of running on CPU
    fallback_ops: frozenset[str] = DEFAULT_FALLBACK_OPS  # TPX_FALLBACK_OPS: comma list, "+op"/"-op" edits
    warn_fallback: bool = True  # TPX_WARN_FALLBACK: warn once per fallback op
    matmul_precision: str = "auto"  # TPX_MATMUL_PRECISION: auto (follow torch), highest, bf16
    autocast: str = "on"  # TPX_AUTOCAST: on (CUDA's cast policy) or off (autocast regions cast nothing)
    rng: str = "device"  # TPX_RNG: device (counter-based, DTensor's offsets honoured) or host (CPU stream order)
    allow_float64: bool = False  # TPX_ALLOW_FLOAT64: lift the no-float64 rule (not like a real chip)
    device_count: int = 2  # TPX_DEVICE_COUNT: physical devices
    # TPX_VISIBLE_DEVICES (like CUDA_VISIBLE_DEVICES): the physical indices this process sees, in
    # order, as tpx:0, tpx:1...; None = all of them, () = none (device_count() is then 0)
    visible_devices: tuple[int, ...] | None = None
    device_name: str = "tpx simulated accelerator (CPU)"

    @property
    def visible_count(self) -> int:
        """How many devices the process sees: what ``torch.tpx.device_count()`` reports."""
        return self.device_count if self.visible_devices is None else len(self.visible_devices)

    def device_hint(self) -> str:
        """The settings that decide the visible devices, for error messages."""
        vis = "unset" if self.visible_devices is None else repr(",".join(map(str, self.visible_devices)))
        return f"TPX_DEVICE_COUNT={self.device_count}, TPX_VISIBLE_DEVICES={vis}"

    def validate(self) -> TpxConfig:
        if self.autocast not in AUTOCAST_MODES:
            raise ValueError(f"autocast (TPX_AUTOCAST) must be one of {', '.join(AUTOCAST_MODES)}, "
                             f"got {self.autocast!r}")
        if self.rng not in RNG_MODES:
            raise ValueError(f"rng (TPX_RNG) must be one of {', '.join(RNG_MODES)}, got {self.rng!r}")
        if self.matmul_precision not in MATMUL_PRECISIONS:
            raise ValueError(
                f"matmul_precision must be one of {', '.join(MATMUL_PRECISIONS)}, got {self.matmul_precision!r}"
            )
        if not 1 <= self.device_count <= 64:
            raise ValueError(f"device_count (TPX_DEVICE_COUNT) must be between 1 and 64, got {self.device_count}")
        if self.visible_devices is not None:
            check_visible(self.visible_devices, self.device_count)
        parse_bytes(self.memory_capacity)
        return self


def check_visible(visible: tuple[int, ...], count: int) -> None:
    seen: set[int] = set()
    for i in visible:
        if not 0 <= i < count:
            raise ValueError(
                f"TPX_VISIBLE_DEVICES: device {i} does not exist (TPX_DEVICE_COUNT={count}: "
                f"physical devices 0..{count - 1})"
            )
        if i in seen:
            raise ValueError(f"TPX_VISIBLE_DEVICES: device {i} is listed twice")
        seen.add(i)


def parse_visible(raw: str | list[int] | tuple[int, ...] | None) -> tuple[int, ...] | None:
    """``"1,0"`` -> (1, 0); ``""`` -> () (no device visible); None -> None (all visible)."""
    if raw is None:
        return None
    if not isinstance(raw, str):
        return tuple(int(i) for i in raw)
    out = []
    for item in (x.strip() for x in raw.split(",")):
        if not item:
            if raw.strip():
                raise ValueError(f"TPX_VISIBLE_DEVICES={raw!r}: empty entry; use e.g. 0,1")
            continue
        if not re.fullmatch(r"[0-9]+", item):
            raise ValueError(
                f"TPX_VISIBLE_DEVICES={raw!r}: {item!r} is not a device index; use a comma list "
                "of physical indices such as 0,1 (\"\" hides every device)"
            )
        out.append(int(item))
    return tuple(out)


def _fallback_ops_from(raw: str, base: frozenset[str]) -> frozenset[str]:
    items = [x.strip() for x in raw.split(",") if x.strip()]
    if items and all(x[0] in "+-" for x in items):
        ops = set(base)
        for x in items:
            (ops.add if x[0] == "+" else ops.discard)(x[1:].removeprefix("aten::"))
        return frozenset(ops)
    return frozenset(x.removeprefix("aten::") for x in items)


def from_env() -> TpxConfig:
    cfg = TpxConfig()
    kw: dict = {}
    if os.environ.get("TPX_MEMORY_CAPACITY"):
        kw["memory_capacity"] = parse_bytes(os.environ["TPX_MEMORY_CAPACITY"])
    kw["strict"] = _env_bool("TPX_STRICT", cfg.strict)
    kw["warn_fallback"] = _env_bool("TPX_WARN_FALLBACK", cfg.warn_fallback)
    kw["allow_float64"] = _env_bool("TPX_ALLOW_FLOAT64", cfg.allow_float64)
    if os.environ.get("TPX_FALLBACK_OPS") is not None:
        kw["fallback_ops"] = _fallback_ops_from(os.environ["TPX_FALLBACK_OPS"], cfg.fallback_ops)
    if os.environ.get("TPX_MATMUL_PRECISION"):
        kw["matmul_precision"] = os.environ["TPX_MATMUL_PRECISION"].strip().lower()
    for name in ("rng", "autocast"):
        if os.environ.get(f"TPX_{name.upper()}"):
            kw[name] = os.environ[f"TPX_{name.upper()}"].strip().lower()
    if os.environ.get("TPX_DEVICE_COUNT"):
        raw = os.environ["TPX_DEVICE_COUNT"].strip()
        if not re.fullmatch(r"[0-9]+", raw):
            raise ValueError(f"TPX_DEVICE_COUNT={raw!r}: expected a number of devices (1..64)")
        kw["device_count"] = int(raw)
    if "TPX_VISIBLE_DEVICES" in os.environ:
        kw["visible_devices"] = parse_visible(os.environ["TPX_VISIBLE_DEVICES"])
    return dataclasses.replace(cfg, **kw).validate()


_config: TpxConfig | None = None
_listeners: list = []


def get_config() -> TpxConfig:
    global _config
    if _config is None:
        _config = from_env()
    return _config


def on_change(fn) -> None:
    """Call ``fn(config)`` now and after every change."""
    _listeners.append(fn)
    fn(get_config())


def configure(**kwargs) -> TpxConfig:
    """Update settings, e.g. ``backend.configure(strict=True, memory_capacity="2GiB")``."""
    global _config
    fields = {f.name for f in dataclasses.fields(TpxConfig)}
    unknown = sorted(set(kwargs) - fields)
    if unknown:
        raise TypeError(f"unknown tpx setting(s): {', '.join(unknown)}; known: {', '.join(sorted(fields))}")
    if "memory_capacity" in kwargs:
        kwargs["memory_capacity"] = parse_bytes(kwargs["memory_capacity"])
    if "fallback_ops" in kwargs:
        ops = kwargs["fallback_ops"]
        if isinstance(ops, str):
            ops = _fallback_ops_from(ops, get_config().fallback_ops)
        kwargs["fallback_ops"] = frozenset(str(o).removeprefix("aten::") for o in ops)
    if "visible_devices" in kwargs:
        kwargs["visible_devices"] = parse_visible(kwargs["visible_devices"])
    for name in ("matmul_precision", "rng", "autocast"):
        if name in kwargs:
            kwargs[name] = str(kwargs[name]).lower()
    new = dataclasses.replace(get_config(), **kwargs).validate()
    _config = new
    for fn in _listeners:
        fn(new)
    logger.debug("tpx config: %s", new)
    return new
