"""agent/settings.py: every FERRY_* variable of the host side, its default and validation in one model."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from agent.settings import (
    DEFAULTS,
    FerrySettings,
    SettingsError,
    resolve_limits,
    settings,
    settings_of,
)

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize(("name", "value", "accepts"), [
    ("FERRY_QUEUE", "nan", "a whole number of 1 or more"),
    ("FERRY_WORKERS", "-3", "a whole number of 1 or more"),
    ("FERRY_MAX_FILES", "1.5", "a whole number of 1 or more"),
    ("FERRY_HEADER_TIMEOUT", "inf", "a finite number above 0"),
    ("FERRY_BODY_TIMEOUT", "soon", "a number above 0"),
])
def test_a_bad_value_names_the_variable_and_what_it_accepts(name: str, value: str, accepts: str) -> None:
    with pytest.raises(SettingsError) as caught:
        _ = settings_of({name: value}).service
    assert caught.value.name == name
    assert str(caught.value) == f"${name} must be {accepts}, got {value!r}"


def test_defaults_blanks_and_surrounding_spaces() -> None:
    s = settings_of({"FERRY_QUEUE": " 12 ", "FERRY_MAX_FILES": "   ", "FERRY_LLM_MODEL": " m ", "FERRY_STATE_DIR": ""})
    assert (s.service.queue, s.service.max_files, s.service.workers, s.service.header_timeout) == (12, 5000, None, 30.0)
    assert s.llm.model == "m" and s.llm.base_url is None and s.paths.state_dir is None


def test_a_bad_value_of_one_part_does_not_stop_the_others() -> None:
    s = settings_of({"FERRY_QUEUE": "nan", "FERRY_LLM_MODEL": "m", "FERRY_KB_PATH": "/kb"})
    assert s.llm.model == "m" and s.paths.kb_path == "/kb"
    with pytest.raises(SettingsError):
        _ = s.service


def test_the_model_key_is_ferrys_variable_else_openais() -> None:
    assert settings_of({"FERRY_LLM_API_KEY": "a", "OPENAI_API_KEY": "b"}).llm.key() == "a"
    assert settings_of({"OPENAI_API_KEY": "b"}).llm.key() == "b"
    assert settings_of({}).llm.key() is None
    assert not settings_of({"FERRY_LLM_MODEL": "m", "OPENAI_API_KEY": "b"}).llm.configured()
    named = {"FERRY_LLM_MODEL": "m", "FERRY_LLM_BASE_URL": "http://x", "OPENAI_API_KEY": "b"}
    assert settings_of(named).llm.configured()


def test_limits_flags_win_and_a_variable_is_checked_only_where_no_flag_overrides_it() -> None:
    env = {"FERRY_LLM_TIMEOUT_S": "soon", "FERRY_LLM_RETRIES": "2"}
    limits = resolve_limits({"request_timeout_s": 5}, env)
    assert (limits.request_timeout_s, limits.max_retries, limits.max_calls) == (5.0, 2, DEFAULTS.max_calls)
    with pytest.raises(ValueError, match=r"^\$FERRY_LLM_TIMEOUT_S: .*got 'soon'"):
        resolve_limits({}, env)


def test_github_variables_are_all_given_to_the_bot_config_unknown_ones_too() -> None:
    values = settings_of({"FERRY_GITHUB_TOKEN": " t ", "FERRY_GITHUB_SOMETHING": "x", "FERRY_GITHUB_LABEL": " "}).github
    assert values.values() == {"TOKEN": "t", "SOMETHING": "x"}


def test_the_accessor_is_cached_and_reads_a_changed_environment_again(monkeypatch) -> None:
    monkeypatch.setenv("FERRY_QUEUE", "7")
    first = settings()
    assert isinstance(first, FerrySettings) and settings() is first and first.service.queue == 7
    monkeypatch.setenv("FERRY_QUEUE", "8")
    assert settings() is not first and settings().service.queue == 8
    monkeypatch.setenv("UNRELATED_VARIABLE", "1")
    assert settings() is settings()


def _environ_reads(tree: ast.AST) -> list[tuple[int, str]]:
    """``os.environ.get("FERRY_...")``, ``os.environ["FERRY_..."]``, ``os.getenv("FERRY_...")``."""
    found = []
    for node in ast.walk(tree):
        key: ast.expr | None = None
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.args:
            target = ast.unparse(node.func.value)
            if (node.func.attr == "get" and target.endswith("environ")) or ast.unparse(node.func) == "os.getenv":
                key = node.args[0]
        elif isinstance(node, ast.Subscript) and ast.unparse(node.value).endswith("environ"):
            key = node.slice
        if isinstance(key, ast.Constant) and isinstance(key.value, str) and key.value.startswith("FERRY_"):
            found.append((node.lineno, key.value))
    return found


def test_no_host_module_reads_a_ferry_variable_by_hand() -> None:
    """agent/ and evals/ read FERRY_* through agent.settings (the cases' own programs are not Ferry's)."""
    modules = [p for package in ("agent", "evals") for p in (ROOT / package).rglob("*.py")
               if "suite" not in p.relative_to(ROOT).parts and p != ROOT / "agent" / "settings.py"]
    found = [f"{p.relative_to(ROOT)}:{line} {name}" for p in modules
             for line, name in _environ_reads(ast.parse(p.read_text(encoding="utf-8")))]
    assert not found, found


def test_the_hand_read_check_finds_each_form() -> None:
    source = 'import os\na = os.environ.get("FERRY_X")\nb = os.environ["FERRY_Y"]\nc = os.getenv("FERRY_Z")\n' \
             'd = os.environ.get("HOME")\n'
    assert _environ_reads(ast.parse(source)) == [(2, "FERRY_X"), (3, "FERRY_Y"), (4, "FERRY_Z")]
