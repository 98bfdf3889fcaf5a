"""`ferry migrate` starts the warm interpreter its runs fork from before the rest of Ferry loads.

The interpreter's torch import takes about a second on one core; started first, it goes on while the
CLI builds its parser (agent/cli/warm_first.py: from the words as typed), imports the migration's modules,
checks its options and opens its store (agent/cli/migrate_cmd.py).
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

import agent.cli
import agent.migration.facade
from agent.cli import main, migrate_cmd, warm_first
from agent.migration.adapters import side_by_side_env
from agent.migration.facade import RunScheduler
from tools.runner import warm


@pytest.fixture
def calls(monkeypatch: pytest.MonkeyPatch) -> list[tuple[object, ...]]:
    seen: list[tuple[object, ...]] = []
    built = migrate_cmd.build_options
    parser = agent.cli.build_parser

    def early(seed: int = 0, caller_env: dict[str, str] | None = None,
              user_env: dict[str, str] | None = None) -> bool:
        seen.append(("early", seed, caller_env, user_env))
        return True

    def build() -> object:
        seen.append(("parser",))
        return parser()

    def prewarm(self: RunScheduler, seed: int, env: dict[str, str] | None = None,
                user_env: dict[str, str] | None = None) -> bool:
        seen.append(("prewarm", self, seed, user_env))
        return True

    def options(args: object) -> object:
        seen.append(("options",))
        return built(args)  # type: ignore[arg-type]

    def start(opts: object, *, runs: RunScheduler, **_: object) -> object:
        seen.append(("start", runs))
        raise ValueError("stopped by the test")

    monkeypatch.setattr(RunScheduler, "prewarm_runs", prewarm)
    monkeypatch.setattr(warm, "prewarm", early)
    monkeypatch.setattr(agent.cli, "build_parser", build)
    monkeypatch.delenv("VIRTUAL_ENV", raising=False)
    monkeypatch.setattr(migrate_cmd, "build_options", options)
    monkeypatch.setattr(agent.migration.facade, "start", start)
    return seen


def _migrate(tmp_path: Path, *extra: str) -> int:
    repo = tmp_path / "repo"
    repo.mkdir(exist_ok=True)
    (repo / "train.py").write_text("print('hi')\n")
    return main(["migrate", str(repo), "--run", "python train.py", "--offline", "--json", "--seed", "7",
                 "--state-dir", str(tmp_path / "state"), *extra])


def test_the_warm_interpreter_starts_before_the_options_are_built_and_the_migration_starts(
        calls: list[tuple[object, ...]], tmp_path: Path) -> None:
    assert _migrate(tmp_path) != 0  # the stand-in start refuses
    assert [c[0] for c in calls] == ["early", "parser", "prewarm", "options", "start"]
    (_, seed, caller_env, user_env), _, (_, prewarmed, seed2, user_env2), _, (_, started) = calls
    # the interpreter started from the words is the one the scheduler's call finds (same seed and variables)
    assert seed == seed2 == 7 and user_env == user_env2 == {} and caller_env == side_by_side_env()
    assert prewarmed is started  # the migration's runs fork from the interpreter started first


@pytest.mark.parametrize("extra", [("--env", "FOO=1"), ("--python", sys.executable)])
def test_runs_that_start_cold_get_no_early_warm_interpreter(calls: list[tuple[object, ...]], tmp_path: Path,
                                                           extra: tuple[str, str]) -> None:
    _migrate(tmp_path, *extra)
    assert [c[0] for c in calls if c[0] in ("prewarm", "early")] == []
    assert ("options",) in calls


def test_with_another_virtualenv_active_no_warm_interpreter_starts(calls: list[tuple[object, ...]], tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """The runs use the active virtualenv's interpreter (tools.runner.interpreter.default_python): Ferry's warm
    interpreter would serve none of them."""
    venv = tmp_path / "venv"
    (venv / "bin").mkdir(parents=True)
    (venv / "bin" / "python").write_text("#!/bin/sh\nexit 1\n")
    (venv / "bin" / "python").chmod(0o755)
    monkeypatch.setenv("VIRTUAL_ENV", str(venv))
    assert _migrate(tmp_path) != 0  # that interpreter is refused
    assert [c[0] for c in calls if c[0] in ("prewarm", "early")] == []


@pytest.mark.parametrize(("words", "seed"), [
    (["migrate", "repo", "--run", "python t.py"], 0),
    (["-v", "migrate", "repo", "--run", "python t.py --seed 3 --python x", "--seed", "7"], 7),
    (["migrate", "repo", "--seed=9", "--run", "python t.py"], 9),
    (["migrate", "repo", "--run", "python t.py", "--", "--python"], 0),  # positional after --
    (["migrate", "repo", "--python", "/usr/bin/python3"], None),
    (["migrate", "repo", "--python=/usr/bin/python3"], None),
    (["migrate", "repo", "--env", "A=1"], None),
    (["migrate", "repo", "--env=A=1"], None),
    (["migrate", "repo", "--py", "/usr/bin/python3"], None),  # argparse's abbreviations are argparse's to read
    (["migrate", "repo", "--se", "3"], None),
    (["migrate", "repo", "--e", "A=1"], None),
    (["migrate", "repo", "--seed", "x"], None),
    (["migrate", "repo", "--seed", "-1"], None),
    (["migrate", "repo", "--seed", str(2**32)], None),
    (["migrate", "repo", "--seed"], None),
    (["migrate", "--help"], None),
    (["-h", "migrate"], None),
])
def test_the_seed_is_read_from_the_words_only_where_they_are_certain(words: list[str], seed: int | None) -> None:
    assert warm_first.seed_of(words) == seed
