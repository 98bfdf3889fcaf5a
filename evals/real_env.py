"""The interpreter a real case runs with: a virtualenv of the repository's own, as its users have one.

Each case's ``ferry migrate`` gets ``--python <venv>/bin/python``, a venv that holds torch==2.13.0
(the CPU build Ferry runs on) and the repository's own requirements (its requirements file and what
the manifest's ``packages`` names), and nothing of Ferry's: no ``ferry`` distribution, none of
Ferry's packages, no pydantic unless the repository asks for it.

Cheap by construction:

- torch and its dependencies are not installed again: their files are hard-linked (copied where
  the cache is on another file system) from the interpreter Ferry runs on, by their ``RECORD``, into
  the new venv's ``site-packages``. The venv owns them as any installed distribution (pip sees torch
  installed, the runner's interpreter check finds its metadata, the sandbox binds only the venv's
  prefix), and a hard link costs no disk. Their console scripts (``torchrun``) are written anew for
  the venv's own interpreter.
- the repository's requirements are installed with Ferry's pip (``pip --python``) under a
  constraints file that pins ``torch==2.13.0`` and rules out torchvision, torchaudio and triton, so
  no requirement can drag in another (CUDA, multi-GB) torch. A build that ends with another torch, or
  with one of those packages, is refused.
- venvs are cached under ``FERRY_EVAL_VENV_CACHE`` (default ``~/.cache/ferry/eval-venvs``), one
  directory per digest of (Python, torch, the requirement list): cases with the same requirements
  share one, and reruns reuse it. A venv counts only once its check passed (``ferry-venv.json``).
"""

from __future__ import annotations

import fcntl
import hashlib
import importlib.metadata as md
import json
import logging
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Iterable
from pathlib import Path

from packaging.markers import default_environment
from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import canonicalize_name

from agent.settings import settings

logger = logging.getLogger(__name__)

BUILDER_VERSION = 1  # part of every venv's key: a change here rebuilds them all
TORCH_VERSION = "2.13.0"
# Never installed into a case's venv: each pulls a torch build of its own (GPU wheels are multi-GB).
NEVER = ("torchvision", "torchaudio", "triton")
NEVER_PREFIXES = ("nvidia-",)
# What a case's interpreter must not be able to import: Ferry's own packages (nothing of Ferry's
# may be there for the migration to lean on), and pydantic unless the repository requires it.
FERRY_MODULES = ("agent", "tools", "sandbox", "backend", "backend_autoload", "cuda_semantics", "evals",
                 "ferry")
MARKER = "ferry-venv.json"
PIP_TIMEOUT_S = 1800.0


class VenvError(RuntimeError):
    """The case's interpreter cannot be built; the message says what went wrong and what to do."""

    status = "failed_environment"


def cache_root() -> Path:
    """Where case venvs live: ``$FERRY_EVAL_VENV_CACHE``, else ``$XDG_CACHE_HOME/ferry/eval-venvs``."""
    given = settings().evals.venv_cache
    if given:
        return Path(given).expanduser()
    base = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return base / "ferry" / "eval-venvs"


# --- requirements ------------------------------------------------------------------------------

def _excluded(name: str) -> bool:
    n = canonicalize_name(name)
    return n == "torch" or n in NEVER or n.startswith(NEVER_PREFIXES)


def parse_requirements(lines: Iterable[str], where: str = "the manifest") -> list[str]:
    """The installable requirements among ``lines`` (a requirements file's, or the manifest's
    ``packages`` as ``pip-name[:module]``): torch and the packages that pull a torch of their own
    dropped (torch is always the venv's 2.13.0), pip options, includes and editables skipped with a
    warning. A line that is not a requirement is a VenvError naming it."""
    out: list[str] = []
    for raw in lines:
        line = raw.split(" #", 1)[0].strip()
        if not line or line.startswith("#"):
            continue
        if line.startswith(("-", "git+", "http:", "https:", "file:", ".", "/")):
            logger.warning("%s: %r is not a plain requirement; skipped", where, line)
            continue
        spec = line.split(":", 1)[0] if ":" in line and "://" not in line and ";" not in line else line
        try:
            req = Requirement(spec)
        except InvalidRequirement as exc:
            raise VenvError(f"{where}: {line!r} is not a pip requirement ({exc})") from None
        if _excluded(req.name):
            continue
        out.append(str(req))
    return sorted(dict.fromkeys(out))


def requirements_of(packages: list[str], checkout: Path | None = None, files: list[str] | None = None) -> list[str]:
    """A case's requirements: its manifest ``packages`` and the repository's own requirement files
    (paths relative to the checkout)."""
    reqs = parse_requirements(packages)
    for rel in files or []:
        path = (checkout or Path(".")) / rel
        try:
            text = path.read_text(encoding="utf-8")
        except OSError as exc:
            raise VenvError(f"the case names the requirements file {rel}, which the checkout cannot give: "
                            f"{exc.strerror or exc}") from None
        reqs += parse_requirements(text.splitlines(), where=rel)
    return sorted(dict.fromkeys(reqs))


# --- torch's files, linked ---------------------------------------------------------------------

def torch_closure() -> list[md.Distribution]:
    """torch and the distributions it requires (recursively, markers evaluated, no extras) in the
    interpreter Ferry runs on."""
    env = {k: str(v) for k, v in default_environment().items()}
    seen: dict[str, md.Distribution] = {}
    todo = ["torch"]
    while todo:
        name = canonicalize_name(todo.pop())
        if name in seen:
            continue
        try:
            dist = md.distribution(name)
        except md.PackageNotFoundError:
            raise VenvError(f"{name}, which torch needs, is not installed in Ferry's environment "
                            f"({sys.prefix}); run scripts/setup again") from None
        seen[name] = dist
        for spec in dist.requires or []:
            req = Requirement(spec)
            if req.marker is None or req.marker.evaluate({**env, "extra": ""}):
                todo.append(req.name)
    torch = seen["torch"]
    if torch.version.split("+")[0] != TORCH_VERSION:
        raise VenvError(f"Ferry's environment has torch {torch.version}, not {TORCH_VERSION}; run scripts/setup")
    return list(seen.values())


def _link(src: Path, dst: Path) -> None:
    dst.parent.mkdir(parents=True, exist_ok=True)
    try:
        os.link(src, dst)
    except OSError:  # another file system (or links refused): a copy
        shutil.copy2(src, dst)


def _site_packages(venv: Path) -> Path:
    v = sys.version_info
    return venv / "lib" / f"python{v.major}.{v.minor}" / "site-packages"


_SCRIPT = """#!{python}
import sys
from {module} import {head}
if __name__ == "__main__":
    sys.exit({call}())
"""


def link_distributions(dists: list[md.Distribution], venv: Path) -> int:
    """Link the site-packages files of ``dists`` into ``venv`` and write their console scripts for
    its interpreter; how many files."""
    site = _site_packages(venv)
    count = 0
    for dist in dists:
        root = Path(str(dist.locate_file(""))).resolve()
        for f in dist.files or []:
            rel = Path(str(f))
            if rel.is_absolute() or ".." in rel.parts:
                continue  # scripts under bin/ (written below) and data outside site-packages
            src = root / rel
            if src.is_file():
                _link(src, site / rel)
                count += 1
        for ep in dist.entry_points:
            if ep.group != "console_scripts" or not re.fullmatch(r"[\w.-]+", ep.name):
                continue
            module, _, attr = ep.value.partition(":")
            attr = attr.strip() or "main"
            script = venv / "bin" / ep.name
            script.write_text(_SCRIPT.format(python=venv / "bin" / "python", module=module.strip(),
                                             head=attr.split(".")[0], call=attr), encoding="utf-8")
            script.chmod(0o755)
    return count


# --- the venv ----------------------------------------------------------------------------------

def venv_key(requirements: list[str]) -> str:
    v = sys.version_info
    raw = json.dumps({"builder": BUILDER_VERSION, "python": [v.major, v.minor, v.micro], "torch": TORCH_VERSION,
                      "requirements": sorted(requirements)}, sort_keys=True)
    return hashlib.sha256(raw.encode()).hexdigest()[:16]


_CHECK = r"""
import importlib.metadata as md, importlib.util as u, json, sys
import torch
mods = json.loads(sys.argv[1])
found = {}
for m in mods:
    try:
        spec = u.find_spec(m)
    except (ImportError, ValueError):
        spec = None
    found[m] = None if spec is None else (spec.origin or (list(spec.submodule_search_locations or []) or [""])[0])
# who needs pydantic: a distribution whose requirements name it (the repository's closure pulled it in)
needs = sorted({d.metadata["Name"] for d in md.distributions() if d.metadata["Name"]
                and any(r.split(";")[0].replace(" ", "").lower().startswith("pydantic")
                        and r.split(";")[0].replace(" ", "").lower()[8:9] in ("", "<", ">", "=", "!", "~", "[", "(")
                        for r in (d.requires or []) if "extra ==" not in r)})
print(json.dumps({"torch": torch.__version__, "prefix": sys.prefix, "modules": found, "pydantic_needed_by": needs,
                  "dists": sorted({d.metadata["Name"] for d in md.distributions() if d.metadata["Name"]})}))
"""


def check_venv(python: Path, requirements: list[str]) -> dict[str, object]:
    """Ask ``python`` (isolated: no cwd, no PYTHONPATH, no user site) for its torch, its distributions
    and where Ferry's module names would come from; VenvError unless torch is 2.13.0 and nothing of
    Ferry's (or pydantic, unless a requirement names it or a distribution of the requirements' closure
    depends on it) is importable there."""
    wanted = {canonicalize_name(Requirement(r).name) for r in requirements}
    mods = [*FERRY_MODULES, *([] if "pydantic" in wanted else ["pydantic"])]
    proc = subprocess.run([str(python), "-I", "-c", _CHECK, json.dumps(mods)], capture_output=True, text=True,
                          timeout=300, cwd=python.parent, env={"PATH": os.environ.get("PATH", "/usr/bin:/bin"),
                                                               "LANG": "C.UTF-8"}, stdin=subprocess.DEVNULL)
    if proc.returncode != 0:
        tail = (proc.stderr or proc.stdout).strip().splitlines()
        raise VenvError(f"the case interpreter {python} does not start torch: {tail[-1] if tail else proc.returncode}")
    info: dict[str, object] = json.loads(proc.stdout.strip().splitlines()[-1])
    problems = []
    if str(info["torch"]).split("+")[0] != TORCH_VERSION:
        problems.append(f"torch is {info['torch']}, not {TORCH_VERSION}")
    dists = [str(d) for d in info["dists"]]  # type: ignore[attr-defined]
    bad = [d for d in dists if (_excluded(d) and canonicalize_name(d) != "torch") or canonicalize_name(d) == "ferry"]
    if bad:
        problems.append(f"it holds {', '.join(bad)}")
    modules: dict[str, str | None] = info["modules"]  # type: ignore[assignment]
    needed_by = [str(d) for d in info.get("pydantic_needed_by") or []]  # type: ignore[attr-defined]
    leaked = [f"{m} ({where})" for m, where in modules.items()
              if where is not None and not (m == "pydantic" and needed_by)]
    if leaked:
        problems.append(f"it can import {', '.join(leaked)}")
    if problems:
        raise VenvError(f"the case interpreter {python} is not a clean user environment: " + "; ".join(problems))
    return info


def _constraints(path: Path) -> Path:
    path.write_text("\n".join([f"torch=={TORCH_VERSION}", *(f"{n}<0" for n in NEVER)]) + "\n", encoding="utf-8")
    return path


def _pip_install(python: Path, requirements: list[str], venv: Path) -> None:
    cmd = [sys.executable, "-m", "pip", "--python", str(python), "install", "--no-input", "--disable-pip-version-check",
           "-q", "-c", str(_constraints(venv / "ferry-constraints.txt")), *requirements]
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV", "PYTHONHOME")}
    logger.info("installing %s into %s", " ".join(requirements), venv)
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=PIP_TIMEOUT_S, env=env,
                              stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired:
        raise VenvError(f"pip did not install {' '.join(requirements)} within {PIP_TIMEOUT_S:.0f}s") from None
    if proc.returncode != 0:
        lines = [ln for ln in (proc.stderr or proc.stdout).strip().splitlines()
                 if not ln.startswith("WARNING: Location")]  # a local index's noise, not the reason
        tail = "\n".join(lines[-8:])
        raise VenvError(f"pip could not install {' '.join(requirements)} next to torch=={TORCH_VERSION} "
                        f"(torchvision, torchaudio and triton are ruled out): {tail}")


def build_venv(venv: Path, requirements: list[str]) -> dict[str, object]:
    """A new venv at ``venv``: torch's closure linked, ``requirements`` installed, checked."""
    if venv.exists():
        shutil.rmtree(venv)
    proc = subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], capture_output=True, text=True,
                          timeout=300)
    if proc.returncode != 0:
        raise VenvError(f"python -m venv {venv} failed: {proc.stderr.strip()[-300:]}")
    files = link_distributions(torch_closure(), venv)
    python = venv / "bin" / "python"
    if requirements:
        _pip_install(python, requirements, venv)
    info = check_venv(python, requirements)
    marker = {"requirements": requirements, "torch_files_linked": files, **info}
    (venv / MARKER).write_text(json.dumps(marker, indent=1), encoding="utf-8")
    return marker


def case_python(requirements: list[str], cache: Path | None = None) -> Path:
    """The interpreter of the cached venv for ``requirements`` (built on first use; concurrent
    builders of the same venv wait for one another)."""
    root = cache or cache_root()
    root.mkdir(parents=True, exist_ok=True)
    key = venv_key(requirements)
    venv = root / key
    with open(root / f"{key}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not (venv / MARKER).is_file():
            logger.info("building the case interpreter %s (%s)", venv, ", ".join(requirements) or "torch only")
            try:
                build_venv(venv, requirements)
            except BaseException:
                shutil.rmtree(venv, ignore_errors=True)
                raise
    return venv / "bin" / "python"
