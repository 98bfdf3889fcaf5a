"""Where Ferry's own documentation lives, for the texts it writes for users (scan tables, SARIF,
reports, commit messages): pages under ``docs/`` that ship with Ferry, never the design inputs.

``docs/idioms.md`` has one section per rule, anchored by the rule id lower-cased (``#fry013``).
Outside a checkout (SARIF read by a code-scanning UI) a relative path means nothing: those links are
made absolute under the docs/ folder that ships with this Ferry (a ``file:`` URL), or under
``$FERRY_DOCS_URL`` where a team publishes that folder."""

from __future__ import annotations

import os
from pathlib import Path

IDIOMS = "docs/idioms.md"
NUMERICS = "docs/numerics.md"
DESIGN = "docs/design.md"
PARITY = "docs/parity.md"
GUARD = "docs/guard.md"

#: the docs/ folder that ships with this Ferry (beside its packages, in the checkout it was installed from)
SHIPPED_DOCS = Path(__file__).resolve().parents[1] / "docs"
#: a team that publishes Ferry's docs/ (an internal site, its fork's web view) names that folder's URL here
DOCS_URL_ENV = "FERRY_DOCS_URL"


def anchor(rule_id: str) -> str:
    """The anchor of a rule's section in docs/idioms.md: its id lower-cased (FRY013 -> fry013)."""
    return rule_id.strip().lower()


def idiom(rule_id: str) -> str:
    """The relative link to a rule's section, e.g. ``docs/idioms.md#fry013``."""
    return f"{IDIOMS}#{anchor(rule_id)}"


def docs_url() -> str:
    """The URL of the docs/ folder, ending in ``/``: ``$FERRY_DOCS_URL`` when set, else the ``file:`` URL
    of the docs/ folder that ships with this Ferry (no guessed web address: a link must reach a page)."""
    url = os.environ.get(DOCS_URL_ENV, "").strip() or SHIPPED_DOCS.as_uri()
    return url if url.endswith("/") else url + "/"


def home_url() -> str:
    """Where a reader starts: the design notes under :func:`docs_url`."""
    return absolute(DESIGN)


def absolute(link: str) -> str:
    """A ``docs/...`` link as a URL under :func:`docs_url`."""
    return docs_url() + link.removeprefix("docs/")
