"""Discovers the offline policy's rules: every :class:`PolicyRule` class defined in a ``rules_*`` module
of this package, in their ``ORDER``. A new rule is a class in a ``rules_*`` module; nothing else lists it."""

from __future__ import annotations

import importlib
import pkgutil
from functools import cache
from pathlib import Path

from agent.policy.base import PolicyRule


@cache
def policy_rules() -> tuple[type[PolicyRule], ...]:
    package = __name__.rsplit(".", 1)[0]  # this package, read from its folder (not imported: it imports us)
    found: list[type[PolicyRule]] = []
    for info in pkgutil.iter_modules([str(Path(__file__).parent)]):
        if not info.name.startswith("rules_"):
            continue
        module = importlib.import_module(f"{package}.{info.name}")
        classes = [value for value in vars(module).values() if isinstance(value, type)
                   and issubclass(value, PolicyRule) and value is not PolicyRule
                   and value.__module__ == module.__name__]
        if not classes:
            raise RuntimeError(f"policy module {module.__name__} defines no PolicyRule class")
        found += classes
    orders = [r.ORDER for r in found]
    if len(orders) != len(set(orders)):
        raise RuntimeError(f"policy rules share an ORDER: {sorted((r.ORDER, r.__name__) for r in found)}")
    ordered = tuple(sorted(found, key=lambda r: r.ORDER))
    undescribed = sorted(set(r.ID for r in ordered) - set(r.ID for r in ordered if r.DESCRIPTION))
    if undescribed:
        raise RuntimeError(f"policy rules without a DESCRIPTION: {undescribed}")
    return ordered


def descriptions() -> dict[str, str]:
    """rule id -> what it does (the first description of classes that share an id), in rule order."""
    out: dict[str, str] = {}
    for rule in policy_rules():
        if rule.DESCRIPTION and rule.ID not in out:
            out[rule.ID] = rule.DESCRIPTION
    return out
