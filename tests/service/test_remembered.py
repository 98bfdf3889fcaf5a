"""An edit answer's files, kept for the session's later attempts, are read back only when they validate."""

from __future__ import annotations

import json
from pathlib import Path

from agent.service import remembered

KEY = remembered.question_key({"rule": "float64_to_float32", "site": "prog.py:7", "diff": "-a\n+b\n"})


def test_kept_files_read_back_as_they_were_kept(tmp_path: Path) -> None:
    files = {"prog.py": "import torch\nx = torch.ones(2).float()\n", "pkg/util.py": "y = 1\n"}
    remembered.keep_edit(tmp_path, KEY, files)
    assert remembered.edited_files(tmp_path, KEY) == files
    assert remembered.edited_files(tmp_path, remembered.question_key({"rule": "other"})) is None  # not kept


def _rewrite(tmp_path: Path, **change: object) -> None:
    path = tmp_path / remembered.ANSWERS_DIR / f"{KEY}.json"
    data = json.loads(path.read_text())
    data.update(change)
    path.write_text(json.dumps(data))


def test_kept_files_that_do_not_validate_are_not_used(tmp_path: Path) -> None:
    remembered.keep_edit(tmp_path, KEY, {"prog.py": "x = 1\n"})
    _rewrite(tmp_path, files={"prog.py": "x = 2\n"})  # changed behind the server's back: digest differs
    assert remembered.edited_files(tmp_path, KEY) is None
    outside = {"../elsewhere.py": "x = 1\n"}  # its own digest, but a path out of the repository
    _rewrite(tmp_path, files=outside, sha256=remembered.files_digest(outside))
    assert remembered.edited_files(tmp_path, KEY) is None
    other = remembered.question_key({"rule": "x"})  # the files of another question under this one's name
    _rewrite(tmp_path, files={"prog.py": "x = 1\n"}, sha256=remembered.files_digest({"prog.py": "x = 1\n"}),
             question=other)
    assert remembered.edited_files(tmp_path, KEY) is None
    (tmp_path / remembered.ANSWERS_DIR / f"{KEY}.json").write_text("{not json")
    assert remembered.edited_files(tmp_path, KEY) is None
