"""The CLI helps where a user goes wrong: a mistyped command, a command given to --run unquoted,
`ferry run` without `--`; and what it prints says what happened (a step's mark follows its outcome,
the migration id comes first, plurals, no issue numbers in help texts, no temp folders left)."""

from __future__ import annotations

import argparse
import json
import re
from pathlib import Path

import pytest

from agent.cli import build_parser, main


def test_a_mistyped_command_names_the_close_one(capsys):
    assert main(["migrat", ".", "--run", "python x.py"]) == 2
    err = capsys.readouterr().err
    assert "unknown command 'migrat'; did you mean 'migrate'?" in err
    assert err.startswith("usage: ferry ")
    assert main(["-v", "scna", "."]) == 2
    assert "did you mean 'scan'?" in capsys.readouterr().err
    assert main(["xyzzy"]) == 2
    err = capsys.readouterr().err
    assert "unknown command 'xyzzy'" in err and "migrate" in err and "did you mean" not in err


@pytest.mark.parametrize(("argv", "quoted"), [
    (["migrate", "{repo}", "--run", "python", "train.py", "--steps", "8"], '--run "python train.py --steps 8"'),
    (["migrate", "{repo}", "--run", "python x.py", "--test", "python", "-m", "pytest", "-q", "tests"],
     '--test "python -m pytest -q tests"'),
    (["pr", "{repo}", "--run", "python", "train.py", "--epochs", "2"], '--run "python train.py --epochs 2"'),
])
def test_an_unquoted_command_is_shown_quoted_with_the_subcommands_usage(tmp_path, capsys, argv, quoted):
    args = [a.format(repo=tmp_path) for a in argv]
    assert main(args) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"usage: ferry {argv[0]} ")  # the sub-command's usage, not ferry's
    assert "unrecognized arguments:" in err
    assert f"takes the whole command as one argument: quote it, {quoted}" in err


def test_other_unrecognized_arguments_get_the_subcommands_usage_without_a_quote_hint(tmp_path, capsys):
    assert main(["scan", str(tmp_path), "--frobnicate"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("usage: ferry scan ") and "unrecognized arguments: --frobnicate" in err
    assert "quote it" not in err


def _help_texts(parser: argparse.ArgumentParser) -> list[str]:
    out = [parser.description or ""]
    for action in parser._actions:
        out.append(str(action.help or ""))
        if isinstance(action, argparse._SubParsersAction):
            for sub in action.choices.values():
                out += _help_texts(sub)
    return out


def test_no_help_text_names_an_issue():
    texts = _help_texts(build_parser())
    assert len(texts) > 100
    bad = [t for t in texts if re.search(r"\bissue[- ]?\d", t, re.IGNORECASE)]
    assert not bad, bad


def test_doctor_says_devices_in_the_plural():
    from agent.cli.doctor_cmd import render

    report = {"isolation": {"level": "rlimits", "available": ["rlimits"], "reasons": [], "drops_uid": False},
              "workspace": {"root": "/tmp/w", "copy_on_write": False},
              "torch": {"torch": "2.13.0", "tpx": True, "tpx_device_count": 2}}
    assert "tpx: available (2 devices)" in render(report)
    report["torch"]["tpx_device_count"] = 1
    assert "tpx: available (1 device)" in render(report)


def test_run_without_dashes_is_a_usage_error_showing_the_line_with_them(tmp_path, capsys):
    (tmp_path / "p.py").write_text("print('hi')\n")
    assert main(["run", str(tmp_path), "python", "p.py", "--steps", "3"]) == 2
    err = capsys.readouterr().err
    assert "put `--` before the command" in err
    assert f"ferry run {tmp_path} -- python p.py --steps 3" in err
    assert main(["run", str(tmp_path), "--device", "cpu", "--timeout", "5", "python", "p.py"]) == 2
    assert f"ferry run {tmp_path} --device cpu --timeout 5 -- python p.py" in capsys.readouterr().err


def _ferry_run_dirs() -> set[Path]:
    import tempfile

    return set(Path(tempfile.gettempdir()).glob("ferry-run-*"))


def test_run_leaves_no_temporary_folder_unless_asked(tmp_path, capsys, monkeypatch):
    import tempfile

    monkeypatch.setenv("TMPDIR", str(tmp_path / "tmp"))
    (tmp_path / "tmp").mkdir()
    monkeypatch.setattr(tempfile, "tempdir", None)  # re-read TMPDIR
    repo = tmp_path / "repo"
    repo.mkdir()
    (repo / "p.py").write_text("print('hi')\n")
    assert main(["run", str(repo), "--device", "cpu", "--", "python", "p.py"]) == 0
    out = capsys.readouterr().out
    assert "status: ok" in out and "artifacts:" not in out
    assert _ferry_run_dirs() == set()
    assert main(["run", str(repo), "--device", "cpu", "--keep", "--", "python", "p.py"]) == 0
    out = capsys.readouterr().out
    kept = _ferry_run_dirs()
    assert len(kept) == 1 and f"artifacts: {next(iter(kept))}" in out
    assert (next(iter(kept)) / "stdout.txt").read_text() == "hi\n"


def test_run_help_says_the_temporary_folder_is_removed(capsys):
    with pytest.raises(SystemExit):
        build_parser().parse_args(["run", "--help"])
    out = " ".join(capsys.readouterr().out.split())
    assert "--keep" in out and "removed after the run" in out and "issue" not in out


@pytest.mark.parametrize(("summary", "status", "outcome"), [
    ("parity fails (module fc1 at step 0) -> matmul_precision_highest", None, "warn"),
    ("parity fails; no rule left", "partial", "fail"),
    ("run failed (error)", None, "warn"),
    ("tests failed (error)", None, "warn"),
    ("stopped: failed_budget: iteration budget exhausted", "failed_budget", "fail"),
    ("parity passes", None, "ok"),
    ("run ok in 1.2s", None, "ok"),
    ("migrated; 2 files in the patch", "migrated", "ok"),
])
def test_a_steps_mark_follows_its_outcome(summary, status, outcome):
    from agent.cli.progress import step_outcome

    assert step_outcome(summary, status) == outcome


def test_progress_prints_a_failing_step_with_a_mark_of_its_own_and_its_name_once():
    from rich.console import Console

    from agent.cli.progress import TerminalProgress
    from agent.migration.facade import NodeUpdate

    progress = TerminalProgress(enabled=True)
    progress.console = Console(record=True, width=200, force_terminal=False)
    progress("parity", NodeUpdate({"steps": [{"node": "parity", "seconds": 0.5,
                                              "summary": "parity fails (fc1) -> matmul_precision_highest"}]}))
    progress("target_run", NodeUpdate({"steps": [{"node": "target_run", "summary": "run ok in 1.0s", "seconds": 1.0}]}))
    text = progress.console.export_text()
    first, second = text.splitlines()[:2]
    assert first.startswith("! parity fails (fc1)") and "parity parity" not in first and "✓" not in first
    assert second.startswith("✓ target_run run ok")


def test_migrate_prints_its_id_first_and_no_resume_hint_once_finished(tmp_path, capsys, monkeypatch):
    import agent.migration.facade

    def finished(opts, migration_id, progress, runs):  # the graph, replaced: what matters is the CLI around it
        return agent.migration.facade.MigrationSnapshot(
            {"migration_id": migration_id, "status": "migrated", "summary": "runs on tpx"})

    monkeypatch.setattr(agent.migration.facade, "start", finished)
    repo = tmp_path / "repo"
    repo.mkdir()
    code = main(["migrate", str(repo), "--run", "python x.py", "--state-dir", str(tmp_path / "s"), "--id", "m-one",
                 "--offline"])
    assert code == 0
    captured = capsys.readouterr()
    err_lines = [line for line in captured.err.splitlines() if line.strip()]
    assert err_lines[0] == "migration m-one: resume with `ferry resume m-one` if interrupted"
    assert "resume" not in captured.out  # the final table: finished, nothing to resume
    assert "migration m-one" in captured.out


def test_an_interrupted_migration_says_how_to_resume_it(tmp_path, capsys, monkeypatch):
    import agent.migration.facade

    def interrupted(opts, migration_id, progress, runs):
        raise KeyboardInterrupt

    monkeypatch.setattr(agent.migration.facade, "start", interrupted)
    (tmp_path / "repo").mkdir()
    assert main(["migrate", str(tmp_path / "repo"), "--run", "python x.py", "--state-dir", str(tmp_path / "s"),
                 "--id", "m-two", "--offline", "--json"]) == 130
    err = capsys.readouterr().err
    assert "migration m-two interrupted: resume it with `ferry resume m-two`" in err and "ferry: interrupted" in err


def test_step_summaries_count_in_the_singular(tmp_path):
    repo = tmp_path / "one"
    repo.mkdir()
    (repo / "train.py").write_text("import torch\nx = torch.ones(2).cuda()\n")
    out = tmp_path / "out"
    main(["migrate", str(repo), "--run", "python train.py", "--offline", "--json", "--state-dir", str(tmp_path / "s"),
          "--out", str(out)])
    steps = {s["node"]: s["summary"] for s in json.loads((out / "result.json").read_text())["steps"]}
    assert steps["ingest"].startswith("1 source file; "), steps
    assert steps["rewrite"] == "rewrote 1 file", steps


def test_the_result_table_leaves_out_outputs_a_migration_does_not_have(tmp_path, capsys):
    repo = tmp_path / "one"
    repo.mkdir()
    (repo / "train.py").write_text("import torch\nx = torch.ones(2).cuda()\n")
    main(["migrate", str(repo), "--run", "python train.py", "--offline", "--state-dir", str(tmp_path / "s"),
          "--out", str(tmp_path / "out")])
    shown = capsys.readouterr().out
    assert "│ report " in shown and "│ result " in shown
    assert "trajectory" not in shown and "None" not in shown  # offline: no model, no trajectory
