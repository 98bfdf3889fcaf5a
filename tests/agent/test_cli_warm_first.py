"""`ferry migrate` starts the warm interpreter its runs fork from before the rest of Ferry loads.

The interpreter's torch import takes about a second on one core; started first, it goes on while the
CLI imports the migration's modules, checks its options and opens its store (agent/cli/migrate_cmd.py).
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

import agent.migration.facade
from agent.cli import main, migrate_cmd
from agent.migration.facade import RunScheduler


@pytest.fixture
def calls(monkeypatch: pytest.MonkeyPatch) -> list[tuple[object, ...]]:
    seen: list[tuple[object, ...]] = []
    built = migrate_cmd.build_options

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
    assert [c[0] for c in calls] == ["prewarm", "options", "start"]
    (_, prewarmed, seed, user_env), _, (_, started) = calls
    assert prewarmed is started  # the migration's runs fork from the interpreter started first
    assert seed == 7 and user_env == {}


@pytest.mark.parametrize("extra", [("--env", "FOO=1"), ("--python", sys.executable)])
def test_runs_that_start_cold_get_no_early_warm_interpreter(calls: list[tuple[object, ...]], tmp_path: Path,
                                                           extra: tuple[str, str]) -> None:
    _migrate(tmp_path, *extra)
    assert [c[0] for c in calls if c[0] == "prewarm"] == []
    assert ("options",) in calls
