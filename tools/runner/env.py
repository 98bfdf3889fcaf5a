"""The environment the runner gives a sandboxed child."""

from __future__ import annotations

import logging
import sys
from functools import lru_cache
from pathlib import Path

from sandbox.env import filter_caller_env
from sandbox.isolation import ferry_root

logger = logging.getLogger(__name__)

CHILD_DIR = Path(__file__).resolve().parent / "child"  # holds the sitecustomize bootstrap

# pytest plugins that reach a sandboxed pytest only because the child runs on Ferry's interpreter
# (langsmith comes with langgraph): never the user's, and langsmith's costs seconds at every start.
FERRY_ONLY_PYTEST_PLUGINS = ("langsmith_plugin",)


@lru_cache(maxsize=1)
def ensure_bytecode() -> None:
    """Compile the child-side modules on the host: the sandbox sees the tree read-only and
    children run with PYTHONDONTWRITEBYTECODE, so without this every start recompiles them."""
    import compileall

    for d in (CHILD_DIR, CHILD_DIR.parent.parent / "redirect"):
        try:
            compileall.compile_dir(str(d), quiet=1, maxlevels=0)
        except OSError as exc:  # read-only install: children just compile in memory
            logger.debug("cannot precompile %s: %s", d, exc)


def child_path_env() -> str:
    """PATH inside the sandbox: this venv's scripts first, so ``python``/``pytest`` are Ferry's."""
    return f"{Path(sys.prefix) / 'bin'}:/usr/local/bin:/usr/bin:/bin"


def child_env(
    *,
    workspace: Path,
    device: str,
    redirect_cuda: str | None,
    seed: int,
    redirect_log: Path | None,
    probe_dir: Path | None,
    profile_dir: Path | None,
    junit_xml: Path | None,
    caller_env: dict[str, str],
) -> dict[str, str]:
    ensure_bytecode()
    kept, dropped = filter_caller_env(caller_env)
    if dropped:
        logger.warning("runner: not passing %s to the child (only FERRY_*/TPX_* keys, never secrets)", ", ".join(sorted(dropped)))
    env = dict(kept)
    env.update(
        {
            "PYTHONPATH": str(CHILD_DIR),
            "PYTHONNOUSERSITE": "1",
            "PYTHONHASHSEED": str(seed),
            "FERRY_ROOT": str(ferry_root()),
            "FERRY_SEED": str(seed),
            "FERRY_DEVICE": device,
            "FERRY_WORKSPACE": str(workspace),
        }
    )
    if device == "cpu":
        # A CPU run must not see tpx as "the accelerator": code that picks
        # torch.accelerator.current_accelerator() would otherwise run on tpx.
        env["TORCH_DEVICE_BACKEND_AUTOLOAD"] = "0"
    if redirect_cuda:
        env["FERRY_REDIRECT_CUDA"] = redirect_cuda
        if redirect_log is not None:
            env["FERRY_REDIRECT_LOG"] = str(redirect_log)
    if probe_dir is not None:
        env["FERRY_PROBE_DIR"] = str(probe_dir)
    if profile_dir is not None:
        env["FERRY_PROFILE_DIR"] = str(profile_dir)
    if junit_xml is not None:
        blocked = " ".join(f"-p no:{name}" for name in FERRY_ONLY_PYTEST_PLUGINS)
        env["PYTEST_ADDOPTS"] = f"--junit-xml={junit_xml} -p no:cacheprovider {blocked}"
    return env
