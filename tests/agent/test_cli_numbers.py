"""Every numeric flag of the CLI refuses nan, inf, negative and non-numbers with exit 2 naming the flag
and the value (argparse's usage error), before anything runs; the real CLI's main()."""

from __future__ import annotations

import argparse

import pytest

from agent.cli import main, numbers

# (command and the arguments it needs besides the flag, the flag)
FLAGS = [
    (["run", ".", "--", "python", "x.py"], "--timeout"),
    (["run", ".", "--", "python", "x.py"], "--memory-gb"),
    (["run", ".", "--", "python", "x.py"], "--seed"),
    (["check", ".", "--run", "python x.py"], "--timeout"),
    (["check", ".", "--run", "python x.py"], "--steps"),
    (["check", ".", "--run", "python x.py"], "--seed"),
    (["migrate", ".", "--run", "python x.py"], "--run-timeout"),
    (["migrate", ".", "--run", "python x.py"], "--max-wall"),
    (["migrate", ".", "--run", "python x.py"], "--max-iterations"),
    (["migrate", ".", "--run", "python x.py"], "--seed"),
    (["migrate", ".", "--run", "python x.py"], "--llm-timeout"),
    (["migrate", ".", "--run", "python x.py"], "--llm-max-wall"),
    (["migrate", ".", "--run", "python x.py"], "--llm-max-calls"),
    (["migrate", ".", "--run", "python x.py"], "--llm-max-tokens"),
    (["migrate", ".", "--run", "python x.py"], "--llm-max-reply-chars"),
    (["eval"], "--llm-max-wall"),
    (["migrate", ".", "--run", "python x.py"], "--llm-backoff"),
    (["migrate", ".", "--run", "python x.py"], "--llm-retries"),
    (["serve"], "--port"),
    (["serve"], "--workers"),
    (["serve"], "--queue"),
    (["serve"], "--max-upload-mb"),
    (["serve"], "--max-files"),
    (["serve"], "--max-unpacked-mb"),
    (["serve"], "--header-timeout"),
    (["serve"], "--body-timeout"),
    (["scan", "."], "--jobs"),
    (["scan", "."], "--max-file-bytes"),
    (["eval"], "--jobs"),
    (["demo"], "--steps"),
]
BAD = ["nan", "inf", "-inf", "-1", "1e999", "abc", "99999999999999999999999999999999999999999"]


@pytest.mark.parametrize("value", BAD)
@pytest.mark.parametrize(("argv", "flag"), FLAGS, ids=[f"{a[0]} {f}" for a, f in FLAGS])
def test_a_bad_number_is_a_usage_error_naming_the_flag(argv: list[str], flag: str, value: str, capsys,
                                                       tmp_path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    if argv[0] == "migrate" and flag.startswith("--llm-"):
        got = _exit_of([*argv, f"{flag}={value}", "--state-dir", str(tmp_path / "state")])
    else:
        got = _exit_of([*argv[:1], f"{flag}={value}", *argv[1:]])
    err = capsys.readouterr().err
    assert got == 2, err
    assert flag in err and value[:40] in err, err
    assert "Traceback" not in err and "unrecognized" not in err


def _exit_of(argv: list[str]) -> int:
    try:
        return main(argv)
    except SystemExit as exc:
        return int(exc.code) if isinstance(exc.code, int) else 1


@pytest.mark.parametrize("value", ["nan", "inf", "-1", "0"])
def test_a_bad_size_is_a_usage_error_naming_the_flag(value: str, capsys, tmp_path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "x.py").write_text("print(1)\n")
    got = _exit_of(["run", f"--disk-limit={value}", ".", "--", "python", "x.py"])
    err = capsys.readouterr().err
    assert got == 2 and "--disk-limit" in err and "Traceback" not in err, err


@pytest.mark.parametrize(("name", "value"), [("FERRY_QUEUE", "nan"), ("FERRY_HEADER_TIMEOUT", "inf"),
                                             ("FERRY_WORKERS", "-3")])
def test_a_bad_number_in_the_environment_names_the_variable(name: str, value: str, capsys, monkeypatch) -> None:
    monkeypatch.setenv(name, value)
    assert _exit_of(["serve", "--help"]) == 2
    err = capsys.readouterr().err
    assert f"${name}" in err and value in err, err


@pytest.mark.parametrize("parse", [numbers.seconds, numbers.positive_float, numbers.positive_int, numbers.gigabytes])
def test_the_whole_text_is_parsed_not_its_first_40_characters(parse) -> None:
    """Second reader: '600.000...000garbage' parsed as 600 because only a cut of the text was read."""
    text = "600." + "0" * 36 + "garbage"
    with pytest.raises(argparse.ArgumentTypeError, match="must be"):
        parse(text)
    with pytest.raises(argparse.ArgumentTypeError, match="must be a plain number, got 5000 characters"):
        parse("1" * 5000)
