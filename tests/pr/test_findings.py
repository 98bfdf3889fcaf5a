"""The check run's findings: paths relative to the repository whatever directory was migrated, and a
file that is not the repository's (a library's, another machine's) left out."""

from __future__ import annotations

from agent.prbot.pr.findings import repo_path


def test_a_findings_path_is_written_relative_to_the_repository():
    assert repo_path("prog.py") == "prog.py"
    assert repo_path("src/m.py", "pkg") == "pkg/src/m.py"
    assert repo_path("src/m.py", "pkg/") == "pkg/src/m.py"
    # a run's own copy of the migrated directory: what follows it, under the directory
    assert repo_path("/tmp/x/ferry-ws-ab12/app/src/m.py", "pkg") == "pkg/src/m.py"
    assert repo_path("/tmp/x/ferry-ws-ab12/app/src/m.py") == "src/m.py"
    # not a file of the repository: no annotation can name it
    assert repo_path("/usr/lib/python3/site-packages/torch/nn/functional.py") is None
    assert repo_path("../outside.py") is None and repo_path("") is None
