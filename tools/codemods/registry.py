"""Discovers the rules: every module in ``tools.codemods.rules`` exports one ``RULE`` class."""

from __future__ import annotations

import importlib
import pkgutil
from functools import lru_cache

from tools.codemods.base import CodemodRule


@lru_cache(maxsize=1)
def all_rules() -> tuple[type[CodemodRule], ...]:
    from tools.codemods import rules as package

    found: list[type[CodemodRule]] = []
    for info in pkgutil.iter_modules(package.__path__):
        module = importlib.import_module(f"{package.__name__}.{info.name}")
        rule = getattr(module, "RULE", None)
        if rule is None:
            raise RuntimeError(f"rule module {module.__name__} defines no RULE")
        found.append(rule)
    ids = [r.ID for r in found]
    if len(ids) != len(set(ids)):
        raise RuntimeError(f"duplicate rule ids: {sorted(ids)}")
    return tuple(sorted(found, key=lambda r: r.ID))


def rule_by_id(rule_id: str) -> type[CodemodRule]:
    for rule in all_rules():
        if rule_id == rule.ID:
            return rule
    raise KeyError(rule_id)
