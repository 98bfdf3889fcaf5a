"""Ferry's part of a pull request's body: rewritten between its markers, a person's text around it kept;
a later attempt's commands, verdict and section written into it (once, however many attempts)."""

from __future__ import annotations

from agent.prbot.pr.ferry_part import END, marked, merged, split, with_attempt

FERRY = """# Migrate

**Status:** partial — parity failed

## Changes by rule

- FRY013

## Reproduce

```sh
ferry pr . --base main --branch ferry/migrate-tpx --run 'python a.py' --test 'pytest -q'
```
"""


def test_an_update_keeps_a_persons_text_around_ferrys_part_and_replaces_a_body_without_markers():
    body = "Mine, above.\n" + marked(FERRY) + "Mine, below.\n"
    assert split(body) == ("Mine, above.\n", FERRY, "\nMine, below.\n")
    again = merged(body, marked("# New\n"))
    assert again == f"Mine, above.\n{marked('# New')[:-1]}\nMine, below.\n"
    assert merged(FERRY, marked("# New\n")) == marked("# New\n")  # no markers: all of it was Ferry's
    assert merged(None, marked("# New\n")) == marked("# New\n")
    assert split("<!-- ferry:begin but never ended") is None


def test_a_later_attempt_sets_the_status_the_commands_and_its_own_section_once():
    body = "Mine.\n" + marked(FERRY)
    one = with_attempt(body, "## Latest attempt\n\nfirst", "**Status:** migrated — ok", "python b.py", None)
    before, inner, after = split(one)  # type: ignore[misc]
    assert before == "Mine.\n" and after == "\n"
    assert "**Status:** migrated — ok" in inner and "partial" not in inner
    assert "--run 'python b.py' --test 'pytest -q'" in inner  # the test command as it was
    assert inner.index("## Latest attempt") < inner.index("## Reproduce")
    two = with_attempt(one, "## Latest attempt\n\nsecond", "**Status:** partial — no", "python c.py", "pytest -x")
    assert two.count("## Latest attempt") == 1 and "second" in two and "first" not in two
    assert "--run 'python c.py' --test 'pytest -x'" in two and two.startswith("Mine.\n") and END in two
    # a body without markers (opened before them) is edited in place, with no markers added around it
    bare = with_attempt(FERRY, "## Latest attempt\n\nx", "**Status:** migrated — ok", "python b.py", None)
    assert "ferry:begin" not in bare and "**Status:** migrated — ok" in bare and "--run 'python b.py'" in bare
