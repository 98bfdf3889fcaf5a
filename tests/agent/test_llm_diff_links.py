"""The model's ``apply_diff`` edits file text only: a diff that turns a file into a symbolic link (to a
host file such as /etc/shadow), changes a mode, renames or carries a binary blob is refused, and what
``git apply`` leaves is read without following links (issue 34, second reader's finding)."""

from __future__ import annotations

from pathlib import Path

import pytest

from agent.errors import EditRejected
from agent.llm.functions import ApplyDiff, EditSession

LINK_DIFF = """diff --git a/config.yaml b/config.yaml
deleted file mode 100644
--- a/config.yaml
+++ /dev/null
@@ -1 +0,0 @@
-a: 1
diff --git a/config.yaml b/config.yaml
new file mode 120000
--- /dev/null
+++ b/config.yaml
@@ -0,0 +1 @@
+{target}
\\ No newline at end of file
"""


def _session(tmp_path: Path) -> EditSession:
    repo = tmp_path / "repo"
    repo.mkdir()
    (repo / "train.py").write_text("print(1)\n")
    (repo / "config.yaml").write_text("a: 1\n")

    def no_runs(*a: object) -> None:
        raise AssertionError("unexpected run")

    return EditSession(repo, repo, {}, no_runs, None, "python train.py", None)


def test_a_diff_that_makes_a_file_a_link_to_a_host_file_is_refused(tmp_path: Path) -> None:
    secret = tmp_path / "host-secret"
    secret.write_text("root:hash:1\n")
    session = _session(tmp_path)
    with pytest.raises(EditRejected, match="'deleted file mode 100644' line; send changes of file text only"):
        session.apply_diff(ApplyDiff(diff=LINK_DIFF.format(target=secret)))
    assert session.files == {}  # nothing of the host file became an edit


@pytest.mark.parametrize("header", ["old mode 100644\nnew mode 100755", "rename from train.py\nrename to t2.py",
                                    "GIT binary patch\nliteral 0"])
def test_other_non_text_headers_are_refused(tmp_path: Path, header: str) -> None:
    diff = (f"diff --git a/train.py b/train.py\n{header}\n--- a/train.py\n+++ b/train.py\n"
            "@@ -1 +1 @@\n-print(1)\n+print(2)\n")
    with pytest.raises(EditRejected, match="send changes of file text only"):
        _session(tmp_path).apply_diff(ApplyDiff(diff=diff))


def test_a_plain_text_diff_still_applies(tmp_path: Path) -> None:
    session = _session(tmp_path)
    diff = "--- a/config.yaml\n+++ b/config.yaml\n@@ -1 +1 @@\n-a: 1\n+a: 2\n"
    assert "+a: 2" in session.apply_diff(ApplyDiff(diff=diff))
    assert session.files == {"config.yaml": "a: 2\n"}
