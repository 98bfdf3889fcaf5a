"""Escaping for text that came out of a sandboxed run (op and test names, messages, output tails).

A run chooses every byte of what it prints and writes, so its text is escaped where it lands:

* ``terminal``: for a terminal — ANSI/VT escape sequences (CSI, OSC such as the clipboard-writing
  ``ESC ] 52``, DCS/APC/PM/SOS strings), C0 and C1 control characters and bidirectional overrides
  are removed; ``\\n`` and ``\\t`` stay, a carriage return becomes a newline (it cannot overwrite
  what was printed before it).
* ``md_inline``: Markdown inline text or a table cell — one line, Markdown syntax and HTML escaped;
  with ``keep_code`` the text's own backtick spans stay code spans (their content is literal).
* ``md_code``: a complete Markdown code span of the text (a fence longer than any backtick run).
* ``html``: HTML text or attribute value.
"""

from __future__ import annotations

import html as _html
import re

# ESC-introduced sequences (7-bit) and their 8-bit C1 forms.
_STRING_SEQ = r"(?:\x1b[\]PX^_]|[\x90\x98\x9d\x9e\x9f])(?:[^\x07\x1b\x9c]*)(?:\x07|\x1b\\|\x9c|$)"
_CSI_SEQ = r"(?:\x1b\[|\x9b)[\x30-\x3f]*[\x20-\x2f]*[\x40-\x7e]?"
_ESC_SEQ = r"\x1b[\x20-\x2f]*[\x30-\x7e]?"
_SEQUENCES = re.compile(f"{_STRING_SEQ}|{_CSI_SEQ}|{_ESC_SEQ}")
_CONTROLS = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f\u200e\u200f\u202a-\u202e\u2066-\u2069]")
# Always escaped: what opens code, emphasis, links, HTML, an entity (&rlm; would render a bidi mark)
# or a table cell anywhere in a line. ``_`` only where it can open or close emphasis (not inside a
# word: GFM never emphasises ``snake_case``), ``#`` only at the start (a heading), ``~`` only doubled
# (strikethrough).
_MD_SPECIAL = re.compile(r"([\\`*\[\]|<>&])|(?<![0-9A-Za-z])_|_(?![0-9A-Za-z])|^#|~~")


def terminal(text: str) -> str:
    """``text`` without anything a terminal would interpret (see the module docstring)."""
    text = _SEQUENCES.sub("", str(text))
    text = text.replace("\r\n", "\n").replace("\r", "\n")
    return _CONTROLS.sub("", text)


def _one_line(text: str) -> str:
    return terminal(text).replace("\n", " ").replace("\t", " ")


def _escape_md(text: str) -> str:
    return _MD_SPECIAL.sub(lambda m: "".join("\\" + c for c in m.group(0)), text)


def md_code(text: str, *, table: bool = False) -> str:
    """A code span showing ``text`` literally (``table``: inside a table row, where ``|`` needs
    escaping even in code)."""
    body = _one_line(text)
    if table:
        body = body.replace("|", "\\|")
    longest = max((len(m) for m in re.findall(r"`+", body)), default=0)
    fence = "`" * (longest + 1)
    if body.startswith("`") or body.endswith("`") or not body.strip():
        body = f" {body} "
    return f"{fence}{body}{fence}"


def md_inline(text: str, *, keep_code: bool = False, table: bool = False) -> str:
    """``text`` as one line of Markdown that renders as written: no emphasis, links, headings,
    HTML or table breaks. ``keep_code``: spans between single backticks (as Ferry's own messages
    quote names) stay code spans; whatever the pairing, code spans are literal and the rest is
    escaped, so the text cannot break out."""
    line = _one_line(text)
    if not keep_code:
        return _escape_md(line)
    parts = line.split("`")
    out: list[str] = []
    for i, part in enumerate(parts):
        if i % 2 == 0 or i == len(parts) - 1:  # plain text (an unpaired last backtick stays text)
            out.append(("\\`" if i % 2 == 1 else "") + _escape_md(part))
        elif part:
            out.append(md_code(part, table=table))
    return "".join(out)


def html(text: str) -> str:
    """``text`` as HTML text or a quoted attribute value, control characters removed."""
    return _html.escape(terminal(text), quote=True)
