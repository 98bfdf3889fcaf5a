"""The one table of torch tensor factories (tools.codemods.tables), checked against torch 2.13."""

from __future__ import annotations

import pytest
import torch

from tools.codemods.tables import DEVICE_FACTORIES, HOST_DATA_TENSORS, LIKE_FACTORIES, TENSOR_FACTORIES
from tools.redirect.tables import FACTORIES as REDIRECTED_FACTORIES


def _takes_device(name: str) -> bool:
    """Whether ``torch.<name>`` has a ``device`` argument: in one of its ATen schemas, or (for the
    functions bound in Python, such as torch.tensor and torch.asarray) in its documented signature."""
    schemas = torch._C._jit_get_schemas_for_operator(f"aten::{name}")
    if any(arg.name == "device" for schema in schemas for arg in schema.arguments):
        return True
    signature = (getattr(torch, name).__doc__ or "").strip().split("\n", 1)[0]
    return signature.startswith(f"{name}(") and "device" in signature.split("->")[0]


@pytest.mark.parametrize("qname", sorted(DEVICE_FACTORIES))
def test_every_factory_takes_a_device(qname):
    module, name = qname.split(".")
    assert module == "torch" and hasattr(torch, name)
    assert _takes_device(name), f"{qname} has no device= in torch {torch.__version__}"


@pytest.mark.parametrize("qname", sorted(HOST_DATA_TENSORS | {"torch.bernoulli"}))
def test_functions_without_a_device_argument_are_not_factories(qname):
    name = qname.split(".")[1]
    assert not _takes_device(name) and qname not in DEVICE_FACTORIES


def test_the_table_reconciles_both_old_lists_and_agrees_with_the_redirect():
    # the policy's list (agent/policy/edits.py) and the codemods' (TENSOR_FACTORIES) disagreed
    policy = {"zeros", "ones", "empty", "full", "rand", "randn", "randint", "randperm", "arange", "linspace",
              "logspace", "eye", "tensor", "as_tensor", "normal", "tril_indices", "triu_indices"}
    codemods = {"tensor", "zeros", "ones", "empty", "full", "rand", "randn", "randint", "arange", "linspace", "eye",
                "zeros_like", "ones_like", "randn_like", "rand_like", "as_tensor"}
    assert {f"torch.{n}" for n in policy | codemods} <= DEVICE_FACTORIES
    assert "torch.from_numpy" in TENSOR_FACTORIES - DEVICE_FACTORIES  # host data: no device= to add
    assert {n for n in DEVICE_FACTORIES if n.endswith("_like")} == LIKE_FACTORIES
    assert "torch.zeros_like" in LIKE_FACTORIES
    # the run-time redirect wraps the same factories (it cannot import libcst-side tables in the child)
    assert {f"torch.{n}" for n in REDIRECTED_FACTORIES} == DEVICE_FACTORIES
