"""Which variables of the user's own may be set for a sandboxed program (``--env``, a session's
``options.env``): the one rule, and the deny-list of loader and interpreter variables with why.

A user variable is allowed when its name is a plain name (``[A-Za-z_][A-Za-z0-9_]*``, at most
``MAX_NAME_CHARS``), its value is at most ``MAX_VALUE_BYTES`` of UTF-8 without a NUL byte, and the
name is in none of the families below. Everything refused says what it is and what to do instead.
Those variables still could not reach a host process (``sandbox.execute`` gives the host side of a run
a fixed environment and sets the run's variables at the last exec, inside the sandbox): the deny-list
is the second line, so that nothing the user sets changes how a dynamic loader, the C library, a
shell or an interpreter starts, wherever a later change might hand them on.

``host_env_problem`` is the check for environments of processes Ferry starts on the host itself (the
warm interpreter): none of the loader, C-library or shell variables there.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping

from sandbox.env import CALLER_PREFIXES, is_secret_name

MAX_NAME_CHARS = 128
MAX_VALUE_BYTES = 16 * 1024
MAX_VARIABLES = 64
MAX_TOTAL_BYTES = 64 * 1024  # names and values of all the user's variables together

NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")

# The user's variables that start with PYTHON and are kept: PYTHONPATH is merged after Ferry's
# bootstrap dir (tools.runner.env.child_env; such runs start cold), the other two only change buffering
# and fault reports of the program's own interpreter.
PYTHON_ALLOWED = frozenset({"PYTHONPATH", "PYTHONUNBUFFERED", "PYTHONFAULTHANDLER"})

_LOADER = ("the dynamic loader reads it as any program starts (it loads libraries, audit modules or "
           "preloaded code into that program)")
_LIBC = "the C library reads it as a program starts (modules, files and settings it loads)"
_SHELL = "a shell reads it as it starts or runs a script (it can run commands or change how they are read)"
_PYTHON = ("the Python interpreter reads it as it starts (startup files, home, import hooks, warnings "
           "filters that import modules...)")
_OTHER_INTERP = "an interpreter other than Python reads it as it starts (code or libraries it loads first)"
_TLS = "it changes which certificates and crypto modules programs trust or load"
_BUILD = "build tools read it to pick compilers, flags and libraries to link"
_RUNNER = "the sandbox sets it for every run (the interpreter's PATH, a private HOME and TMPDIR, the shell)"

# family -> (names, prefixes, why)
DENY: tuple[tuple[str, frozenset[str], tuple[str, ...], str], ...] = (
    ("loader", frozenset({"GLIBC_TUNABLES"}), ("LD_", "DYLD_"), _LOADER),
    ("libc", frozenset({"GCONV_PATH", "GETCONF_DIR", "HOSTALIASES", "LOCALDOMAIN", "LOCPATH", "NIS_PATH",
                        "NLSPATH", "RESOLV_HOST_CONF", "RES_OPTIONS", "TZDIR", "MALLOC_TRACE"}),
     ("MALLOC_", "MEMUSAGE_"), _LIBC),
    ("shell", frozenset({"ENV", "BASH_ENV", "SHELLOPTS", "BASHOPTS", "PS1", "PS2", "PS3", "PS4", "IFS",
                         "CDPATH", "PROMPT_COMMAND", "GLOBIGNORE", "ZDOTDIR", "FPATH", "HISTFILE"}),
     ("BASH_",), _SHELL),
    ("python", frozenset(), ("PYTHON",), _PYTHON),
    ("interpreter", frozenset({"RUBYOPT", "RUBYLIB", "NODE_OPTIONS", "NODE_PATH", "JAVA_TOOL_OPTIONS",
                               "_JAVA_OPTIONS", "JDK_JAVA_OPTIONS", "TCLLIBPATH", "OMP_TOOL",
                               "OMP_TOOL_LIBRARIES", "GIO_MODULE_DIR", "TERMINFO", "TERMINFO_DIRS",
                               "TERMCAP"}),
     ("PERL", "LUA_", "GIT_"), _OTHER_INTERP),
    ("tls", frozenset({"OPENSSL_CONF", "CURL_CA_BUNDLE", "REQUESTS_CA_BUNDLE"}), ("SSL_", "OPENSSL_"), _TLS),
    ("build", frozenset(), ("PKG_CONFIG",), _BUILD),
    ("runner", frozenset({"PATH", "HOME", "TMPDIR", "SHELL", "PWD", "OLDPWD", "SHLVL"}), (), _RUNNER),
)

# What a process Ferry starts on the host may never have in its environment, whoever built it.
HOST_FAMILIES = frozenset({"loader", "libc", "shell"})


def denied_family(name: str) -> tuple[str, str] | None:
    """(family, why) when ``name`` is on the deny-list, else None (PYTHON_ALLOWED names are not)."""
    if name in PYTHON_ALLOWED:
        return None
    upper = name.upper()  # the loader and the shells only read upper case, but err on refusing
    for family, names, prefixes, why in DENY:
        if upper in names or upper.startswith(prefixes):
            return family, why
    return None


def variable_problem(key: str, value: str) -> str | None:
    """Why ``key=value`` cannot be one of the user's variables for a sandboxed run, or None."""
    shown = key if len(key) <= 60 else key[:60] + "..."
    if not NAME.fullmatch(key):
        return (f"{shown!r} is not a variable name: use letters, digits and _, not starting with a digit "
                "(e.g. DATA_DIR)")
    if len(key) > MAX_NAME_CHARS:
        return f"the name {shown} is longer than {MAX_NAME_CHARS} characters"
    if "\0" in value:
        return f"the value of {key} holds a NUL byte"
    size = len(value.encode("utf-8", "surrogatepass"))
    if size > MAX_VALUE_BYTES:
        return (f"the value of {key} is {size} bytes, more than {MAX_VALUE_BYTES}; "
                "put long data in a file of the repository")
    if key.startswith(CALLER_PREFIXES):
        return (f"{key} is one of Ferry's own settings or run hooks (FERRY_*/TPX_*), which the runner sets; "
                "give Ferry settings with --set (ferry check), --env on ferry run, or Ferry's own environment")
    denied = denied_family(key)
    if denied is not None:
        family, why = denied
        if family == "runner":
            return (f"{key} is set by the runner for every run: {why}; it cannot be replaced. "
                    "For another interpreter use --python")
        return (f"{key} is refused: {why}. Ferry never lets a variable of this kind ({family} variables, see "
                "docs/sandbox.md \"Environment\") into a run; if your program needs it, set it in the run "
                f"command itself (e.g. \"{key}=... python train.py\"), where it reaches only the sandboxed program")
    if is_secret_name(key):
        return f"{key} looks like a credential; Ferry never passes secrets into the sandbox"
    return None


def variables_problem(env: Mapping[str, str],
                      check: Callable[[str, str], str | None] = variable_problem) -> str | None:
    """Why the user's variables ``env`` cannot be used together (their number, each one by ``check``,
    then their size in all), or None."""
    if len(env) > MAX_VARIABLES:
        return f"{len(env)} variables given, at most {MAX_VARIABLES} are allowed"
    for key, value in env.items():
        problem = check(key, value)
        if problem is not None:
            return problem
    total = sum(len(k.encode()) + len(v.encode("utf-8", "surrogatepass")) + 2 for k, v in env.items())
    if total > MAX_TOTAL_BYTES:
        return f"the variables take {total} bytes in all, more than {MAX_TOTAL_BYTES}; put long data in a file"
    return None


def host_env_problem(env: Mapping[str, str]) -> str | None:
    """Why ``env`` may not be the environment of a process Ferry starts on the host (a loader, C-library
    or shell variable in it), or None."""
    for key in env:
        denied = denied_family(key)
        if denied is not None and denied[0] in HOST_FAMILIES:
            return f"{key} may not reach a process Ferry starts on the host: {denied[1]}"
    return None


def host_safe_env(env: Mapping[str, str]) -> tuple[dict[str, str], list[str]]:
    """``env`` without its loader, C-library and shell variables, and the names left out."""
    kept: dict[str, str] = {}
    dropped: list[str] = []
    for key, value in env.items():
        denied = denied_family(key)
        if denied is not None and denied[0] in HOST_FAMILIES:
            dropped.append(key)
        else:
            kept[key] = value
    return kept, sorted(dropped)
