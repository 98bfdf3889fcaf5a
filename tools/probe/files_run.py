"""The repository's files in the order the run began executing them (stdlib only: this runs in the
user's process, at exit).

The script comes first (``__main__``'s file, or ``sys.argv[0]``), then the modules: ``sys.modules`` keeps its
keys in the order modules were entered, which is the order they began to run; the files under the repository's root
(``FERRY_WORKSPACE``) are the run's own. Where the command names no file (``python -c``, a shell script, a
launcher, a console script) the host reads the first of them as the program's start
(docs/agent.md, "Where the precision fix goes").
"""

from __future__ import annotations

import os
import sys

#: how many files a dump lists at most (the first ones are those that matter)
MAX_FILES = 256


def _main_file() -> str | None:
    """The script the run started with: ``__main__``'s file, else ``sys.argv[0]`` (a launcher that runs the
    script in a module of its own leaves the file on the loader, or only in ``argv``)."""
    main = sys.modules.get("__main__")
    for path in (getattr(main, "__file__", None), getattr(getattr(main, "__loader__", None), "path", None),
                 sys.argv[0] if sys.argv else None):
        if isinstance(path, str) and path and os.path.isfile(path):
            return os.path.abspath(path)
    return None


def files_run(root: str | None) -> list[str]:
    """Files under ``root`` (relative, ``/``-separated) whose modules this process ran, in order: the main
    script, then every module with a file in the order it was entered into ``sys.modules``."""
    if not root:
        return []
    base = os.path.realpath(root).rstrip(os.sep) + os.sep
    paths = [_main_file()]
    # a module's own absolute file only (torch.ops names "_ops.py", which is no file of the run's)
    paths += [getattr(m, "__file__", None) for m in list(sys.modules.values())]
    found: list[str] = []
    for path in paths:
        if not isinstance(path, str) or not os.path.isabs(path):
            continue
        full = os.path.realpath(path)
        if full.startswith(base):
            rel = full[len(base):].replace(os.sep, "/")
            if rel not in found:
                found.append(rel)
                if len(found) >= MAX_FILES:
                    break
    return found
