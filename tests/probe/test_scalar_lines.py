"""Printed metrics in the shapes programs print them; timings, memory, devices and counters left out."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tools.probe.config import DEFAULT_SCALAR_PATTERN, ProbeConfig
from tools.probe.scalar_names import is_metric_name
from tools.probe.scalars import parse_scalars

PATTERN = re.compile(DEFAULT_SCALAR_PATTERN)


@pytest.mark.parametrize(
    ("line", "expected"),
    [
        # the PDE solver of issue 26: the step coordinate t, dtype and device are not metrics
        ("t=0.0100 max_err=1.234e-05 dtype=torch.float64 device=cuda:0", [("max_err", 1.234e-05)]),
        ("t=0.0100 max_err=1.234e-05 dtype=torch.float32 device=tpx:0", [("max_err", 1.234e-05)]),
        ("step 3 loss=1.2 acc: 0.5 lr 1e-3", [("loss", 1.2), ("acc", 0.5), ("lr", 0.001)]),
        ("it 10 residual 3.2e-09 energy: -1.5E+02", [("residual", 3.2e-09), ("energy", -150.0)]),
        ("Energy = 0.25, Residual = 1e-12", [("Energy", 0.25), ("Residual", 1e-12)]),
        ("time = 0.5  E_kin=0.125 E_pot: 2.5", [("E_kin", 0.125), ("E_pot", 2.5)]),
        ("epoch 2: val_acc 97.5% train_loss 0.031", [("val_acc", 97.5), ("train_loss", 0.031)]),
        ("{'loss': 0.5, 'accuracy': 0.75, 'epoch': 3}", [("loss", 0.5), ("accuracy", 0.75)]),
        ('{"eval_loss": 1.25, "eval_runtime": 3.4, "eval_samples_per_second": 120.5}', [("eval_loss", 1.25)]),
        ("loss: tensor(2.3012, grad_fn=<NllLossBackward0>)", [("loss", 2.3012)]),
        ("Train Epoch: 1 [0/60000 (0%)]\tLoss: 2.305400", [("Loss", 2.3054)]),
        ("Test set: Average loss: 0.0331, Accuracy: 9891/10000 (99%)", [("loss", 0.0331)]),
        ("Epoch [1/10], Step [100/600], Loss: 0.2345", [("Loss", 0.2345)]),
        ("Final L2 error: 0.5.", [("error", 0.5)]),  # a sentence ends; not a version number
        ("loss nan grad_norm inf", [("loss", float("nan")), ("grad_norm", float("inf"))]),
        # timings and rates: never compared
        ("step 5 | loss 2.1 | time 0.31s | 1234 tok/s | mfu 41.2% | elapsed: 12.5", [("loss", 2.1)]),
        ("iter 3: loss 1.5, dt 120.4ms, throughput=812.3, samples/s: 51.2", [("loss", 1.5)]),
        ("epoch_time: 3.2 step_time=0.1 eta 00:03:12 wall=4.5", []),
        ("took: 3.2 s", []),
        ("score: 12.5 seconds", []),
        ("100%|##########| 50/50 [00:03<00:00, 14.2it/s, loss=0.123]", [("loss", 0.123)]),
        ("0.5 s/it", []),
        # memory and devices: never compared
        ("mem 123MB max_memory_allocated=2048 reserved: 4096 gpu0: 12", []),
        ("peak memory: 1.5 GB, rss=300", []),
        ("cuda:0 tensor on tpx:0 device: 0 rank 0 local_rank=1 world_size=2 pid=1234 seed=42", []),
        ("tensor(0.5000, device='cuda:0', dtype=torch.float64)", []),
        # counters, versions, dates, prose
        ("step 10 epoch=2 global_step: 300 batch 4", []),
        ("torch 2.13.0 python 3.11.4 date: 2024-01-05 12:30:01", []),
        ("Processed 1000 images using 4 workers", []),
        ("nothing to see 3.0", []),
        ("/tmp/ferry-space-1-2-n3-4030aaf1/ws/repo/train.py:30: UserWarning: x", []),
    ],
)
def test_printed_metrics_are_parsed_and_machine_numbers_left_out(line: str, expected: list) -> None:
    found = parse_scalars(line, PATTERN)
    assert [n for n, _ in found] == [n for n, _ in expected], line
    for (_, got), (_, want) in zip(found, expected, strict=True):
        assert got == pytest.approx(want) or (got != got and want != want)


def test_nan_is_a_value() -> None:
    (name, value), = parse_scalars("loss nan", PATTERN)
    assert name == "loss" and value != value


def test_the_default_config_uses_the_default_rules() -> None:
    assert ProbeConfig(out_dir=Path(".")).scalar_pattern == DEFAULT_SCALAR_PATTERN


def test_a_pattern_of_the_users_own_decides_alone() -> None:
    """FERRY_PROBE_SCALAR_PATTERN is the override: names the default rules leave out count when it says so."""
    own = re.compile(r"(?P<name>step_time)=(?P<value>[0-9.]+)")
    assert parse_scalars("step_time=0.25 loss=1", own) == [("step_time", 0.25)]


@pytest.mark.parametrize("name", ["maxMemoryAllocated", "gpu0", "train_time", "tok/s", "samples_per_second",
                                  "step", "global_step", "t", "cuda", "tpx"])
def test_machine_and_counter_names_are_not_metrics(name: str) -> None:
    assert not is_metric_name(name, spaced=False)


@pytest.mark.parametrize("name", ["max_err", "l2_error", "residual", "energy", "lr", "val/loss", "epoch_loss",
                                  "valLoss", "u_max"])
def test_result_names_are_metrics(name: str) -> None:
    assert is_metric_name(name, spaced=False)
