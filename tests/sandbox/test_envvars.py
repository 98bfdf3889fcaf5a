"""sandbox.envvars, the one reader of Ferry's settings in the environment, and its users' messages."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from sandbox.artifacts import ArtifactLimits
from sandbox.envvars import EnvVarError, env_enabled, env_int, env_value, parse_size
from sandbox.limits import disk_limit_from_env
from tools.probe.config import config_from_env as probe_config
from tools.profile.config import config_from_env as profile_config


@pytest.mark.parametrize("raw, value", [("12", 12), (" 100_000 ", 100_000), ("1e6", 1_000_000), ("2.5", 2),
                                        ("-3", -3), ("123456789012345678901", 123456789012345678901)])
def test_counts_are_read_in_every_spelling_accepted_so_far(raw: str, value: int) -> None:
    assert env_int("FERRY_X", 7, {"FERRY_X": raw}) == value


@pytest.mark.parametrize("env", [{}, {"FERRY_X": ""}, {"FERRY_X": "   "}])
def test_unset_empty_or_blank_is_the_default(env: dict[str, str]) -> None:
    assert env_int("FERRY_X", 7, env) == 7
    assert env_int("FERRY_X", None, env) is None
    assert env_enabled("FERRY_X", env) is True
    assert env_value("FERRY_X", None, parse_size, env) is None


@pytest.mark.parametrize("raw", ["lots", "inf", "-inf", "nan", "1e400", "1,000", "0x10"])
def test_what_is_not_a_count_is_an_error_naming_the_variable(raw: str) -> None:
    with pytest.raises(EnvVarError) as err:
        env_int("FERRY_X", 7, {"FERRY_X": raw})
    assert str(err.value) == f"FERRY_X={raw!r} is not an integer"
    assert isinstance(err.value, ValueError) and (err.value.name, err.value.value) == ("FERRY_X", raw)


def test_a_minimum_and_the_callers_words_make_the_message() -> None:
    def count(raw: str) -> int:
        return env_int("FERRY_X", 5, {"FERRY_X": raw}, minimum=1, expected="a positive whole number",
                       hint="; give a count such as 5")

    assert count("1") == 1
    for raw in ("0", "-2", "few"):
        with pytest.raises(EnvVarError) as err:
            count(raw)
        assert str(err.value) == f"FERRY_X='{raw}' is not a positive whole number; give a count such as 5"


@pytest.mark.parametrize("raw, on", [("0", False), ("false", False), (" OFF ", False), ("No", False),
                                     ("1", True), ("yes", True), ("maybe", True)])
def test_a_switch_is_on_unless_turned_off(raw: str, on: bool) -> None:
    assert env_enabled("FERRY_X", {"FERRY_X": raw}) is on


@pytest.mark.parametrize("raw, size", [("512M", 512 << 20), ("4G", 4 << 30), ("4GiB", 4 << 30), ("1.5g", 3 << 29),
                                       ("2 kb", 2048), ("1048576", 1 << 20), ("1T", 1 << 40)])
def test_sizes(raw: str, size: int) -> None:
    assert parse_size(raw) == size
    assert env_value("FERRY_X", None, parse_size, {"FERRY_X": raw}) == size


def test_a_bad_size_names_the_variable_and_what_to_give() -> None:
    with pytest.raises(EnvVarError) as err:
        env_value("FERRY_X", None, parse_size, {"FERRY_X": " 4Q "})
    assert str(err.value) == ("FERRY_X='4Q': '4Q' is not a size: give bytes or a number with K, M, G or T "
                              "(e.g. 512M, 4G, 4GiB)")


def test_the_disk_limit_keeps_its_minimum_and_messages(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FERRY_DISK_LIMIT", "2G")
    assert disk_limit_from_env() == 2 << 30
    monkeypatch.setenv("FERRY_DISK_LIMIT", "512K")
    with pytest.raises(ValueError, match=r"^FERRY_DISK_LIMIT='512K': '512K' is too small: a run needs at least 1M$"):
        disk_limit_from_env()
    monkeypatch.delenv("FERRY_DISK_LIMIT")
    assert disk_limit_from_env() is None


def test_an_infinite_artifact_cap_is_a_clear_error_not_an_overflow() -> None:
    """``inf`` read as a float overflowed int() (OverflowError: a traceback out of ``ferry run``)."""
    with pytest.raises(ValueError, match=r"^FERRY_ARTIFACT_MAX_FILES='inf' is not a positive whole number; give a "
                                         r"count such as 10000 \(or unset it for the default\)$"):
        ArtifactLimits.from_env({"FERRY_ARTIFACT_MAX_FILES": "inf"})


def test_the_probe_warns_about_a_bad_count_and_goes_on(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """The probe runs inside the user's program: a bad count (``1e400`` overflowed before) is the default."""
    with caplog.at_level(logging.WARNING, logger="tools.probe.config"):
        cfg = probe_config({"FERRY_PROBE_DIR": str(tmp_path), "FERRY_PROBE_STEPS": "1e400",
                            "FERRY_PROBE_MAX_BYTES": "lots", "FERRY_PROBE_INPUTS": "off"})
    assert cfg is not None and (cfg.steps, cfg.max_bytes, cfg.record_inputs) == (2, 64 << 20, False)
    assert [r.getMessage() for r in caplog.records] == [
        "FERRY_PROBE_STEPS='1e400' is not an integer; using 2",
        "FERRY_PROBE_MAX_BYTES='lots' is not an integer; using 67108864",
    ]


def test_the_profile_refuses_a_bad_count(tmp_path: Path) -> None:
    env = {"FERRY_PROFILE_DIR": str(tmp_path), "FERRY_PROFILE_REPO_ROOT": str(tmp_path)}
    cfg = profile_config({**env, "FERRY_PROFILE_STEPS": "5", "FERRY_PROFILE_TRACE": "0", "FERRY_PROFILE_SYNCS": "yes"})
    assert cfg is not None and (cfg.steps, cfg.trace, cfg.track_syncs) == (5, False, True)
    with pytest.raises(ValueError, match=r"^FERRY_PROFILE_WARMUP='x' is not an integer$"):
        profile_config({**env, "FERRY_PROFILE_WARMUP": "x"})


def test_the_probe_hooks_reader_does_not_import_the_whole_sandbox():
    """The sandboxed child's probe/profile hooks import sandbox.envvars at every probed start: that
    must not load the sandbox's runner machinery (execute, warm starts, cgroups)."""
    import subprocess
    import sys

    code = ("import sys, sandbox.envvars; "
            "print(sorted(m for m in sys.modules if m.startswith('sandbox.') and m != 'sandbox.envvars'))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]", out
    import sandbox

    assert sandbox.run_in_sandbox.__module__ == "sandbox.execute"  # the package's names still resolve
