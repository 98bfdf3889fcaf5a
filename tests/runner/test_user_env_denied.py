"""The user's variables: one rule (plain names, bounded sizes) and a deny-list of loader, C-library, shell
and interpreter variables (``sandbox.userenv``), applied by the runner's ``RunRequest`` as by the CLI and the
service; and the warm interpreter, a host process, never starts with any of the user's variables."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest
from pydantic import ValidationError

from tools.runner.env import user_env_problem, user_env_problems
from tools.runner.models import RunRequest

_spec = importlib.util.spec_from_file_location(
    "planted_library", Path(__file__).resolve().parents[1] / "sandbox" / "planted_library.py")
assert _spec is not None and _spec.loader is not None
planted = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(planted)
build_hook, markers_seen, requires_gcc = planted.build_hook, planted.markers_seen, planted.requires_gcc

# one name per family (and the ones the attack used), with a word of the reason given
DENIED = [
    ("LD_PRELOAD", "dynamic loader"), ("LD_LIBRARY_PATH", "dynamic loader"), ("LD_AUDIT", "dynamic loader"),
    ("LD_DEBUG_OUTPUT", "dynamic loader"), ("ld_preload", "dynamic loader"), ("GLIBC_TUNABLES", "dynamic loader"),
    ("DYLD_INSERT_LIBRARIES", "dynamic loader"),
    ("GCONV_PATH", "C library"), ("GETCONF_DIR", "C library"), ("HOSTALIASES", "C library"),
    ("LOCALDOMAIN", "C library"), ("RES_OPTIONS", "C library"), ("NLSPATH", "C library"), ("LOCPATH", "C library"),
    ("MALLOC_CHECK_", "C library"), ("MALLOC_ARENA_MAX", "C library"),
    ("BASH_ENV", "shell"), ("ENV", "shell"), ("SHELLOPTS", "shell"), ("BASHOPTS", "shell"), ("PS4", "shell"),
    ("IFS", "shell"), ("CDPATH", "shell"), ("BASH_FUNC_x", "shell"),
    ("PYTHONSTARTUP", "Python interpreter"), ("PYTHONHOME", "set by the runner"),
    ("PYTHONINSPECT", "Python interpreter"), ("PYTHONUSERBASE", "Python interpreter"),
    ("PYTHONBREAKPOINT", "Python interpreter"), ("PYTHONEXECUTABLE", "Python interpreter"),
    ("PYTHONWARNINGS", "Python interpreter"), ("PYTHONPLATLIBDIR", "Python interpreter"),
    ("PERL5LIB", "other than Python"), ("PERL5OPT", "other than Python"), ("RUBYOPT", "other than Python"),
    ("NODE_OPTIONS", "other than Python"), ("JAVA_TOOL_OPTIONS", "other than Python"),
    ("OMP_TOOL_LIBRARIES", "other than Python"), ("GIT_SSH_COMMAND", "other than Python"),
    ("SSL_CERT_FILE", "certificates"), ("SSL_CERT_DIR", "certificates"), ("OPENSSL_CONF", "certificates"),
    ("PKG_CONFIG_PATH", "build tools"),
    ("TMPDIR", "set by the runner"), ("PATH", "set by the runner"), ("HOME", "set by the runner"),
    ("SHELL", "set by the runner"),
    ("FERRY_SEED", "Ferry's own settings"), ("TPX_EXTENSION_DIR", "Ferry's own settings"),
    ("AWS_SECRET_ACCESS_KEY", "credential"), ("DB_PASSWORD", "credential"),
]


@pytest.mark.parametrize(("key", "why"), DENIED)
def test_each_family_of_the_deny_list_is_refused_with_its_reason(key: str, why: str, tmp_path: Path) -> None:
    problem = user_env_problem(key, "x")
    assert problem is not None and why in problem, problem
    with pytest.raises(ValidationError, match=why):
        RunRequest(path=tmp_path, command="python x.py", user_env={key: "x"})


@pytest.mark.parametrize(("env", "why"), [
    ({"A-B": "x"}, "not a variable name"), ({"A=B": "x"}, "not a variable name"), ({"": "x"}, "not a variable name"),
    ({"X" * 129: "x"}, "longer than 128"), ({"DATA": "a\0b"}, "NUL byte"), ({"DATA": "x" * 16385}, "more than 16384"),
    ({f"V{i}": "x" for i in range(65)}, "at most 64"), ({f"V{i}": "x" * 16000 for i in range(5)}, "in all"),
])
def test_names_and_sizes_are_bounded(env: dict[str, str], why: str, tmp_path: Path) -> None:
    problem = user_env_problems(env)
    assert problem is not None and why in problem, problem
    with pytest.raises(ValidationError, match=why):
        RunRequest(path=tmp_path, command="python x.py", user_env=env)


def test_plain_variables_and_the_kept_python_ones_are_allowed(tmp_path: Path) -> None:
    env = {"DATA_DIR": "/data", "HF_HOME": "/tmp/hf", "OMP_NUM_THREADS": "2", "PYTHONPATH": "src",
           "PYTHONUNBUFFERED": "1", "CUDA_VISIBLE_DEVICES": "0", "X": "y" * 16384}
    assert user_env_problems(env) is None
    assert RunRequest(path=tmp_path, command="python x.py", user_env=env).user_env == env


@requires_gcc
def test_the_warm_interpreter_never_starts_with_the_users_variables(tmp_path: Path) -> None:
    """The warm interpreter runs on the host (as root in our containers) before any sandbox: the user's
    variables, allowed or not, never reach it (such runs start cold), so a planted library is never loaded."""
    from tools.runner import warm

    markers = tmp_path / "markers"
    lib = build_hook(tmp_path / "lib", markers)
    for env in ({"LD_PRELOAD": str(lib)}, {"DATA_DIR": "/data"}):
        try:
            started = warm.prewarm(seed=424242, user_env=env)
        except ValueError as exc:  # refused outright is as good
            assert "LD_PRELOAD" in str(exc)
            started = False
        assert started is False
        assert warm.cold_reason(env) is not None and "cold" in str(warm.cold_reason(env))
    with pytest.raises(ValueError, match="LD_PRELOAD"):  # and a server is never started with one
        warm.WarmServer({**warm.server_env(424242), "LD_PRELOAD": str(lib)}, [])
    assert markers_seen(markers) == []
