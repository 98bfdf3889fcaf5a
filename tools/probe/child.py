"""Probe installation: in the sandboxed child (from env) or in-process (tests, notebooks)."""

from __future__ import annotations

import atexit
import json
import logging
import os
import re
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import torch
from torch.optim import optimizer as optim_mod

from ..profile.tpx_stats import read_tpx_stats
from . import recorder as rec
from .config import ENDED_EXIT_CODE, ENDED_FILE, ProbeConfig, config_from_env
from .files_run import files_run
from .grads import GradProbe
from .hooks import ModuleProbe
from .results import SaveProbe, record_final
from .scalars import ScalarTee

logger = logging.getLogger(__name__)


class ProbeSession:
    """An installed probe: recorder + module hooks + stream tees. ``close()`` writes the dump."""

    def __init__(self, config: ProbeConfig) -> None:
        self.config = config
        self.recorder = rec.Recorder(config)
        self.modules = ModuleProbe(self.recorder)
        self.saves = SaveProbe(self.recorder)
        self.grads = GradProbe(self.recorder, self.modules)
        self._tees: list[tuple[str, ScalarTee]] = []
        self._end_handle: Any = None
        self.closed = False

    def install(self) -> ProbeSession:
        if rec.active() is not None:
            raise RuntimeError("a probe is already active in this process")
        rec.set_active(self.recorder)
        self.recorder.meta.update(_run_meta())
        self.modules.install()
        if self.config.record_saves:
            self.saves.install()
        self.grads.install()
        if self.config.end_after_steps and self.config.steps > 0:
            self.modules.on_steps_done = self._steps_done
            # after the module and gradient probes' own step hooks: the step's gradients are recorded by then
            self._end_handle = optim_mod.register_optimizer_step_post_hook(self._after_step)
        if self.config.capture_streams:
            pattern = re.compile(self.config.scalar_pattern)
            for name in ("stdout", "stderr"):
                stream = getattr(sys, name)
                if stream is not None:
                    tee = ScalarTee(stream, self.recorder, pattern)
                    setattr(sys, name, tee)
                    self._tees.append((name, tee))
        self.recorder.flush()
        return self

    def discard(self) -> None:
        """Stop recording and write nothing more: this process only launched the processes that
        do the work (``torch.multiprocessing.spawn``'s parent); their dumps are the run's."""
        if self.closed:
            return
        self.closed = True
        self.recorder.discarded = True
        self._uninstall()
        if rec.active() is self.recorder:
            rec.set_active(None)

    def _after_step(self, optimizer: Any, args: Any, kwargs: Any) -> None:
        if self.modules.steps_done():
            self._steps_done()

    def _may_end(self) -> bool:
        """Only the program's own process, on its main thread, is ended: never a worker (``mp.spawn``,
        a DataLoader worker, a torchrun rank), whose end the job's other processes would wait for."""
        if os.getpid() != self.recorder.meta.get("pid") or threading.current_thread() is not threading.main_thread():
            return False
        if any(os.environ.get(k) for k in ("RANK", "LOCAL_RANK", "TORCHELASTIC_RUN_ID")):
            return False
        import multiprocessing

        return multiprocessing.parent_process() is None

    def _steps_done(self) -> None:
        """FERRY_PROBE_END: the recorded steps (and the recorded optimizer steps' gradients) are done: write
        the whole dump, then ``ended.json`` beside it, and end the process with ``ENDED_EXIT_CODE``. Where it
        cannot be ended cleanly the program runs on as usual."""
        if self.closed or torch.compiler.is_compiling() or not self.grads.done():
            return
        try:
            if not self._may_end():
                return
            steps = self.modules.step
            self.recorder.meta["ended_after_steps"] = steps
            self.close(final=False)
            marker = {"steps": steps, "optimizer_steps": self.modules.optimizer_steps,
                      "root_calls": self.modules.root_calls}
            tmp = self.config.out_dir / (ENDED_FILE + ".tmp")
            tmp.write_text(json.dumps(marker), encoding="utf-8")
            os.replace(tmp, self.config.out_dir / ENDED_FILE)
            for stream in (sys.stdout, sys.stderr, sys.__stdout__, sys.__stderr__):
                if stream is not None:
                    stream.flush()
        except Exception:  # never break the user's run: it goes on (unprobed once closed)
            logger.debug("probe: the program could not be ended after its recorded steps", exc_info=True)
            return
        os._exit(ENDED_EXIT_CODE)

    def _uninstall(self) -> None:
        if self._end_handle is not None:
            self._end_handle.remove()
            self._end_handle = None
        self.modules.uninstall()
        self.saves.uninstall()
        self.grads.uninstall()
        for name, tee in self._tees:
            tee.finish()
            if getattr(sys, name) is tee:
                setattr(sys, name, tee._stream)
        self._tees = []

    def close(self, final: bool = True) -> None:
        """Write the dump; ``final``: record the top-level tensors of ``__main__`` (the program's end state:
        not for a program the probe ends after its steps)."""
        if self.closed:
            return
        self.closed = True
        self._uninstall()
        if final and self.config.record_final:
            try:
                record_final(self.recorder)
            except Exception:  # never break the user's exit
                logger.debug("probe: recording the final tensors failed", exc_info=True)
        extra = _run_meta(final=True)
        extra["steps_seen"] = self.modules.step
        extra["optimizer_steps"] = self.modules.optimizer_steps
        extra["optimizer_steps_total"] = self.recorder.optimizer_step
        extra["root_calls"] = self.modules.root_calls
        extra["unrecorded_root_calls"] = self.modules.unrecorded_root_calls
        extra["files_run"] = files_run(os.environ.get("FERRY_WORKSPACE"))
        self.recorder.close(extra)
        if rec.active() is self.recorder:
            rec.set_active(None)


def _run_meta(final: bool = False) -> dict[str, Any]:
    meta: dict[str, Any] = {
        "torch": torch.__version__,
        "matmul_precision": torch.get_float32_matmul_precision(),
        "env": {k: v for k, v in os.environ.items() if k.startswith(("TPX_", "FERRY_"))},
    }
    if final:
        try:
            stats = read_tpx_stats()
            if stats is not None:
                meta["tpx"] = stats
        except Exception:  # stats are a bonus
            logger.debug("probe: tpx stats unavailable", exc_info=True)
    return {("final_" + k if final and k != "tpx" else k): v for k, v in meta.items()}


@contextmanager
def probe_session(out_dir: Path | str, **settings: Any) -> Iterator[ProbeSession]:
    """In-process probe: ``with probe_session(dir, steps=1): model(x)`` writes a dump to ``dir``."""
    session = ProbeSession(ProbeConfig(out_dir=Path(out_dir), **settings)).install()
    try:
        yield session
    finally:
        session.close()


_CHILD_SESSION: ProbeSession | None = None


def install_from_env() -> ProbeSession | None:
    """Called by the runner's bootstrap when ``FERRY_PROBE_DIR`` is set; writes the dump at exit."""
    global _CHILD_SESSION
    if _CHILD_SESSION is not None:
        return _CHILD_SESSION
    config = config_from_env()
    if config is None:
        return None
    _CHILD_SESSION = ProbeSession(config).install()
    atexit.register(_CHILD_SESSION.close)
    logger.info("probe: recording to %s (steps=%d, max_bytes=%d)", config.out_dir, config.steps, config.max_bytes)
    return _CHILD_SESSION


def discard_from_env() -> None:
    """The bootstrap's: this process launched the job's workers (``torch.multiprocessing.spawn``);
    its own (empty) dump must not replace theirs."""
    if _CHILD_SESSION is not None:
        _CHILD_SESSION.discard()
