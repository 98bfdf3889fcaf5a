"""FRY017 outside Python: CUDA environment variables in shell scripts, Dockerfiles, Makefiles,
.env files and YAML job configs, in the walk, the API and the table/JSON/SARIF outputs."""

from __future__ import annotations

import json
import subprocess

import pytest

from agent.cli import main
from tools.codemods.prefilter import RULE_TRIGGERS
from tools.codemods.tables import CUDA_ENV_VARS, cuda_env_var
from tools.scan.api import ScanInputError, rewrite, scan
from tools.scan.envfiles import env_file_kind, scan_text, shell_shebang
from tools.scan.models import RewriteRequest, ScanRequest
from tools.scan.walker import discover

FILES = {
    "train.py": "import os\nos.environ['CUDA_VISIBLE_DEVICES'] = '0'\n",
    "scripts/run.sh": "#!/usr/bin/env bash\n# export CUDA_VISIBLE_DEVICES=7\n"
                      "export CUDA_VISIBLE_DEVICES=0,1  # NCCL_DEBUG in a comment\n"
                      "NCCL_DEBUG=INFO torchrun train.py \"$@\"\n",
    "bin/launch": "#!/bin/sh\nexport CUDA_LAUNCH_BLOCKING=1\n",
    "bin/tool": "#!/usr/bin/env python3\nCUDA_LAUNCH_BLOCKING = 1\n",
    "docker/Dockerfile": ("FROM python:3.11\n# ENV NCCL_DEBUG=WARN\n"
                          "ENV PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True\n"),
    "Makefile": "FLAGS = x # CUBLAS_WORKSPACE_CONFIG\ntrain:\n\tCUBLAS_WORKSPACE_CONFIG=:4096:8 python train.py\n",
    ".env": "NCCL_SOCKET_IFNAME=eth0\n# NVIDIA_TF32_OVERRIDE=0\n",
    "ci/job.yaml": "jobs:\n  train:\n    env:\n      CUDA_VISIBLE_DEVICES: \"0\"  # NCCL_DEBUG\n"
                   "      - name: TORCH_NCCL_ASYNC_ERROR_HANDLING\n        value: \"1\"\n"
                   "    run: NCCL_P2P_DISABLE=1 python train.py\n",
    "notes.txt": "CUDA_VISIBLE_DEVICES=0\n",
    "LICENSE": "CUDA_VISIBLE_DEVICES\n",
    "vendor/setup.sh": "export CUDA_VISIBLE_DEVICES=0\n",
    "ignored/run.sh": "export CUDA_VISIBLE_DEVICES=0\n",
    ".gitignore": "ignored/\n",
}

EXPECTED = [  # (file, line, col, variable)
    (".env", 1, 1, "NCCL_SOCKET_IFNAME"),
    ("Makefile", 3, 2, "CUBLAS_WORKSPACE_CONFIG"),
    ("train.py", 2, 12, "CUDA_VISIBLE_DEVICES"),
    ("bin/launch", 2, 8, "CUDA_LAUNCH_BLOCKING"),
    ("ci/job.yaml", 4, 7, "CUDA_VISIBLE_DEVICES"),
    ("ci/job.yaml", 5, 15, "TORCH_NCCL_ASYNC_ERROR_HANDLING"),
    ("ci/job.yaml", 7, 10, "NCCL_P2P_DISABLE"),
    ("docker/Dockerfile", 3, 5, "PYTORCH_CUDA_ALLOC_CONF"),
    ("scripts/run.sh", 3, 8, "CUDA_VISIBLE_DEVICES"),
    ("scripts/run.sh", 4, 1, "NCCL_DEBUG"),
]


@pytest.fixture
def repo(tmp_path):
    for rel, text in FILES.items():
        p = tmp_path / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(text, encoding="utf-8")
    return tmp_path


def test_walk_picks_env_files_and_respects_ignore_and_vendored(repo):
    files = discover(repo)
    assert files == [".env", "Makefile", "train.py", "bin/launch", "ci/job.yaml", "docker/Dockerfile",
                     "scripts/run.sh"]
    assert "ignored/run.sh" in discover(repo, respect_gitignore=False)


def test_walk_inside_git_uses_the_same_selection(repo):
    subprocess.run(["git", "init", "-q", str(repo)], check=True)
    assert discover(repo) == sorted([".env", "Makefile", "train.py", "bin/launch", "ci/job.yaml",
                                     "docker/Dockerfile", "scripts/run.sh"])


def test_scan_reports_each_variable_with_position_snippet_and_equivalent(repo):
    report = scan(ScanRequest(path=repo))
    assert [(f.file, f.line, f.col) for f in report.findings] == [e[:3] for e in EXPECTED]
    by_file = {(f.file, f.line, f.col): f for f in report.findings}
    for file, line, col, var in EXPECTED:
        f = by_file[(file, line, col)]
        assert f.rule_id == "FRY017" and f.category == "review" and f.rule_name == "memory.cuda-env"
        assert var in f.message and f.rewrite == cuda_env_var(var).equivalent
        assert f.end_line == line and f.end_col - f.col == (len(var) + 2 if file == "train.py" else len(var))
        assert f.snippet == FILES[file].splitlines()[line - 1].strip()
        assert f.blocks == ["tpx", "cpu"]
    assert report.summary.by_rule == {"FRY017": len(EXPECTED)}
    assert "TPX_DEVICE_COUNT" in by_file[("scripts/run.sh", 3, 8)].rewrite
    assert "GLOO_SOCKET_IFNAME" in by_file[(".env", 1, 1)].rewrite


def test_rule_filter_and_rewrite_leave_env_files_as_review(repo):
    assert scan(ScanRequest(path=repo, rules=["FRY002"])).findings == []
    result = rewrite(RewriteRequest(path=repo))
    assert result.files == []  # review only: nothing is rewritten, no file changes
    assert sorted((f.file, f.line) for f in result.review) == sorted((e[0], e[1]) for e in EXPECTED)
    only = rewrite(RewriteRequest(path=repo, files=["scripts/run.sh"], lines={"scripts/run.sh": [4]}))
    assert [(f.file, f.line) for f in only.review] == [("scripts/run.sh", 4)]


def test_single_files_and_bad_input(repo):
    report = scan(ScanRequest(path=repo / "docker" / "Dockerfile"))
    assert [(f.file, f.line) for f in report.findings] == [("Dockerfile", 3)]
    with pytest.raises(ScanInputError, match="shell script, Dockerfile"):
        scan(ScanRequest(path=repo / "notes.txt"))


def test_size_binary_and_encoding_rules_apply(tmp_path):
    (tmp_path / "big.sh").write_text("export CUDA_VISIBLE_DEVICES=0\n" * 50, encoding="utf-8")
    (tmp_path / "bin.env").write_bytes(b"\0\0CUDA_VISIBLE_DEVICES=0")
    (tmp_path / "latin.yaml").write_bytes("a: caf\xe9 CUDA_VISIBLE_DEVICES\n".encode("latin-1"))
    report = scan(ScanRequest(path=tmp_path, max_file_bytes=200))
    assert report.findings == []
    assert {n.file: n.kind for n in report.notes} == {"big.sh": "skipped_size", "bin.env": "skipped_binary",
                                                      "latin.yaml": "skipped_encoding"}


def test_json_table_and_sarif_outputs(repo, capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "300")  # the table must not wrap file:line:col
    assert main(["scan", str(repo), "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert [(f["file"], f["line"], f["col"]) for f in data["findings"]] == [e[:3] for e in EXPECTED]
    assert main(["scan", str(repo)]) == 0
    table = capsys.readouterr().out
    assert "scripts/run.sh:3:8" in table and "Dockerfile" in table and f"{len(EXPECTED)} findings" in table
    out = repo / "scan.sarif"
    assert main(["scan", str(repo), "--sarif", str(out)]) == 0
    run = json.loads(out.read_text())["runs"][0]
    locations = [(r["locations"][0]["physicalLocation"]["artifactLocation"]["uri"],
                  r["locations"][0]["physicalLocation"]["region"]["startLine"],
                  r["locations"][0]["physicalLocation"]["region"]["startColumn"]) for r in run["results"]]
    assert locations == [e[:3] for e in EXPECTED]
    assert all(r["ruleId"] == "FRY017" and r["level"] == "warning" for r in run["results"])
    assert all(r["locations"][0]["physicalLocation"]["artifactLocation"]["uriBaseId"] == "SRCROOT"
               for r in run["results"])


def test_sarif_uri_is_percent_encoded(tmp_path):
    (tmp_path / "my scripts").mkdir()
    (tmp_path / "my scripts" / "run job.sh").write_text("export NCCL_DEBUG=INFO\n", encoding="utf-8")
    out = tmp_path / "scan.sarif"
    assert main(["scan", str(tmp_path), "--sarif", str(out)]) == 0
    result = json.loads(out.read_text())["runs"][0]["results"][0]
    assert result["locations"][0]["physicalLocation"]["artifactLocation"]["uri"] == "my%20scripts/run%20job.sh"


@pytest.mark.parametrize("head,shell", [
    (b"#!/bin/sh\n", True), (b"#!/bin/bash -e\n", True), (b"#!/usr/bin/env bash\n", True),
    (b"#! /usr/bin/env -S zsh -f\n", True), (b"#!/usr/bin/env python3\n", False), (b"echo hi\n", False),
])
def test_shebang_detection(head, shell):
    assert shell_shebang(head) is shell


def test_kinds_by_name(tmp_path):
    for rel, kind in [("a.sh", "shell"), ("a.bash", "shell"), ("Dockerfile.gpu", "dockerfile"),
                      ("x.dockerfile", "dockerfile"), ("GNUmakefile", "makefile"), ("rules.mk", "makefile"),
                      (".env.local", "dotenv"), ("prod.env", "dotenv"), ("k8s.yml", "yaml"), ("a.txt", None)]:
        assert env_file_kind(tmp_path, rel) == kind, rel


def test_comments_quotes_and_words():
    sh = ('echo "$#" "${#ARR}" # NCCL_DEBUG\n'
          "MY_CUDA_VISIBLE_DEVICES=1 CUDA_VISIBLE_DEVICES_X=2 NCCL_=3\n"
          "echo '# not a comment: NCCL_DEBUG'\n"
          "echo ${CUDA_HOME}/bin\n")
    assert [(h.line, h.col, h.name) for h in scan_text(sh, "shell")] == [(3, 24, "NCCL_DEBUG"), (4, 8, "CUDA_HOME")]
    make = "A = don't # NCCL_DEBUG\nB = x\\#NCCL_DEBUG\n"
    assert [(h.line, h.name) for h in scan_text(make, "makefile")] == [(2, "NCCL_DEBUG")]


def test_env_table_is_data_shared_with_the_python_rule_and_prefilter_safe():
    import re

    words = re.compile("|".join(RULE_TRIGGERS["FRY017"]), re.IGNORECASE)
    for name, entry in CUDA_ENV_VARS.items():
        assert entry.reason and entry.equivalent
        assert words.search(name), f"{name} would be skipped by the FRY017 pre-filter"
    assert cuda_env_var("NCCL_ALGO") is not None and cuda_env_var("TORCH_NCCL_BLOCKING_WAIT") is not None
    assert cuda_env_var("NCCL_") is None and cuda_env_var("PATH") is None


def test_python_rule_reports_variables_set_inside_command_strings_but_not_docstrings():
    from tools.codemods.engine import analyze

    src = ('"""Set CUDA_VISIBLE_DEVICES=0 before running."""\n'
           'import os\n'
           'cmd = "CUDA_VISIBLE_DEVICES=0 NCCL_P2P_LEVEL=NVL torchrun x.py"\n'
           'args = ["env", "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True", "python"]\n'
           'plain = "MY_CUDA_VISIBLE_DEVICES=1 PATH=/bin"\n'
           'os.environ["NCCL_DEBUG"] = "INFO"\n')
    found = [(f.line, f.message) for f in analyze(src, rewrite=False).findings if f.rule_id == "FRY017"]
    assert [line for line, _ in found] == [3, 4, 6]
    assert "CUDA_VISIBLE_DEVICES, NCCL_P2P_LEVEL" in found[0][1]
