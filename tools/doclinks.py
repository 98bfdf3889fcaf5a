"""Where Ferry's own documentation lives, for the texts it writes for users (scan tables, SARIF,
reports, commit messages): pages under ``docs/`` that ship with Ferry, never the design inputs.

``docs/idioms.md`` has one section per rule, anchored by the rule id lower-cased (``#fry013``).
Outside a checkout (SARIF read by a code-scanning UI) a relative path means nothing: those links
are made absolute with the ``Documentation`` URL of the installed package's ``[project.urls]``."""

from __future__ import annotations

from functools import lru_cache

IDIOMS = "docs/idioms.md"
NUMERICS = "docs/numerics.md"
DESIGN = "docs/design.md"
PARITY = "docs/parity.md"

#: used when the installed metadata names no Documentation URL (kept equal to pyproject.toml's)
DEFAULT_DOCS_URL = "https://github.com/ferry-accelerator/ferry/blob/main/docs/"
DEFAULT_HOME_URL = "https://github.com/ferry-accelerator/ferry"


def anchor(rule_id: str) -> str:
    """The anchor of a rule's section in docs/idioms.md: its id lower-cased (FRY013 -> fry013)."""
    return rule_id.strip().lower()


def idiom(rule_id: str) -> str:
    """The relative link to a rule's section, e.g. ``docs/idioms.md#fry013``."""
    return f"{IDIOMS}#{anchor(rule_id)}"


@lru_cache(maxsize=1)
def _project_urls() -> dict[str, str]:
    from importlib.metadata import PackageNotFoundError, metadata

    try:
        entries = metadata("ferry").get_all("Project-URL") or []
    except PackageNotFoundError:
        return {}
    urls = {}
    for entry in entries:
        label, _, url = entry.partition(",")
        if url.strip():
            urls[label.strip().lower()] = url.strip()
    return urls


def docs_url() -> str:
    """The URL of the docs/ folder (``[project.urls] Documentation``), ending in ``/``."""
    url = _project_urls().get("documentation", DEFAULT_DOCS_URL)
    return url if url.endswith("/") else url + "/"


def home_url() -> str:
    """The project's home page (``[project.urls] Homepage``)."""
    return _project_urls().get("homepage", DEFAULT_HOME_URL)


def absolute(link: str) -> str:
    """A ``docs/...`` link as a URL under :func:`docs_url`."""
    return docs_url() + link.removeprefix("docs/")
