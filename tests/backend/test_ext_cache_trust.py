"""The extension cache loads no code another uid could have planted (issue 34, item 2).

A sandboxed run (a throw-away uid that sees the host's /tmp at ``--isolation unshare``) could create
``<tmp>/ferry-tpx-ext-0/<digest>/{READY,tpx_ext.so}``; a root process whose home cache was empty
then loaded it. Here a real shared object whose constructor writes a marker is planted where the
cache is looked up, and a fresh root interpreter must neither run it nor build into its dir.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from backend_autoload import ext_cache

ROOT = Path(__file__).resolve().parents[2]
OTHER_UID = 814154  # the kind of throw-away uid a sandboxed run gets

needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="chowning a planted cache to another uid needs root")

_PLANT = r"""
#include <fcntl.h>
#include <unistd.h>
__attribute__((constructor)) static void planted(void) {
    int fd = open(MARKER, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd >= 0) { write(fd, "ran\n", 4); close(fd); }
}
"""


def _real_library() -> Path:
    so = ext_cache.cached_library()
    if so is None:
        import backend  # noqa: F401  (builds into the caller's cache, as `scripts/setup` does)
        from backend import _ext

        so = Path(_ext.get().__file__ or "")
    return so


def _planted_library(tmp_path: Path, marker: Path) -> Path:
    src = tmp_path / "plant.c"
    src.write_text(_PLANT)
    out = tmp_path / "plant.so"
    subprocess.run(["gcc", "-shared", "-fPIC", f'-DMARKER="{marker}"', "-o", str(out), str(src)], check=True)
    return out


def _fill(d: Path, so: Path, uid: int | None = None) -> None:
    """A finished cache dir ``d``: the library and a READY naming it (owned by ``uid`` if given)."""
    d.mkdir(parents=True, exist_ok=True)
    shutil.copy(so, d / "tpx_ext.so")
    (d / "READY").write_text("tpx_ext.so\n")
    if uid is not None:
        for p in (d.parent, d, d / "tpx_ext.so", d / "READY"):
            os.chown(p, uid, uid)


def _fresh_python(env_overrides: dict[str, str], tmp_path: Path, code: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k not in ("TPX_EXTENSION_DIR", "TMPDIR", "HOME")}
    env.update(env_overrides)
    env["PYTHONPATH"] = str(ROOT)
    return subprocess.run([sys.executable, "-c", code], cwd=tmp_path, env=env, capture_output=True, text=True,
                          timeout=300)


_LOAD = (
    "import torch, backend\n"
    "from backend import _ext\n"
    "try:\n"
    "    mod = _ext.get(build=False)\n"
    "except RuntimeError as exc:\n"
    "    print('ERROR', exc)\n"
    "else:\n"
    "    print('LOADED', mod.__file__, torch.ones(2, device='tpx').add(1).cpu().tolist())\n"
)


@needs_root
def test_planted_extension_dir_is_refused_and_a_safe_cache_is_used(tmp_path: Path) -> None:
    digest = ext_cache.source_hash()
    marker = tmp_path / "marker"
    planted = _planted_library(tmp_path, marker)
    ext_dir = tmp_path / "ext"
    _fill(ext_dir / digest, planted, uid=OTHER_UID)
    ext_dir.chmod(0o755)
    home = tmp_path / "home"
    home.mkdir()
    safe_tmp = tmp_path / "tmp"  # the per-user temp fallback, made by us: the real library in it
    safe_tmp.mkdir(mode=0o755)
    _fill(safe_tmp / "ferry-tpx-ext-0" / digest, _real_library())

    proc = _fresh_python({"TPX_EXTENSION_DIR": str(ext_dir), "HOME": str(home), "TMPDIR": str(safe_tmp)},
                         tmp_path, _LOAD)

    assert not marker.exists(), "the planted library's constructor ran as root"
    assert proc.returncode == 0, proc.stderr
    assert f"LOADED {safe_tmp / 'ferry-tpx-ext-0' / digest / 'tpx_ext.so'} [2.0, 2.0]" in proc.stdout
    assert f"owned by uid {OTHER_UID}" in proc.stderr and str(ext_dir) in proc.stderr


@needs_root
def test_planted_temp_fallback_is_refused_with_an_empty_home(tmp_path: Path) -> None:
    """The reported attack: <tmp>/ferry-tpx-ext-0/<digest> made by a sandboxed run's uid."""
    digest = ext_cache.source_hash()
    marker = tmp_path / "marker"
    planted = _planted_library(tmp_path, marker)
    shared_tmp = tmp_path / "tmp"
    shared_tmp.mkdir()
    shared_tmp.chmod(0o1777)  # like /tmp: anyone may create the fallback dir first
    _fill(shared_tmp / "ferry-tpx-ext-0" / digest, planted, uid=OTHER_UID)
    home = tmp_path / "home"
    home.mkdir()

    proc = _fresh_python({"HOME": str(home), "TMPDIR": str(shared_tmp)}, tmp_path, _LOAD)

    assert not marker.exists(), "the planted library's constructor ran as root"
    assert proc.returncode == 0, proc.stderr
    assert "ERROR tpx C++ extension is not built yet" in proc.stdout
    assert f"{shared_tmp / 'ferry-tpx-ext-0'} owned by uid {OTHER_UID}" in proc.stderr
    # and a build would not go there either (the home cache is tried first, then this is refused)
    problem = ext_cache.prepare_dir(shared_tmp / "ferry-tpx-ext-0" / digest)
    assert problem is not None and f"owned by uid {OTHER_UID}" in problem


def test_a_cache_dir_made_for_a_build_is_ours_and_not_writable_by_others(tmp_path: Path) -> None:
    shared_tmp = tmp_path / "tmp"
    shared_tmp.mkdir()
    old = os.umask(0o002)  # a group-writable umask must not leak into the cache
    try:
        assert ext_cache.prepare_dir(shared_tmp / "ferry-tpx-ext-0" / "abc") is None
    finally:
        os.umask(old)
    for d in (shared_tmp / "ferry-tpx-ext-0", shared_tmp / "ferry-tpx-ext-0" / "abc"):
        st = d.lstat()
        assert st.st_uid == os.geteuid() and st.st_mode & 0o777 == 0o755


def _safe_cache(tmp_path: Path) -> Path:
    d = tmp_path / "cache" / "root" / "0123456789abcdef"
    _fill(d, _real_library())
    for p in (tmp_path / "cache", d.parent, d):
        p.chmod(0o755)
    return d


def test_a_trusted_cache_dir_is_used(tmp_path: Path) -> None:
    d = _safe_cache(tmp_path)
    assert ext_cache.built_library(d) == d / "tpx_ext.so"


@pytest.mark.parametrize("where", ["above", "root", "digest", "library", "ready"])
def test_a_group_or_other_writable_component_is_refused(tmp_path: Path, where: str) -> None:
    d = _safe_cache(tmp_path)
    path = {"above": tmp_path / "cache", "root": d.parent, "digest": d, "library": d / "tpx_ext.so",
            "ready": d / "READY"}[where]
    path.chmod(path.stat().st_mode | 0o020)
    assert ext_cache.built_library(d) is None
    path.chmod(path.stat().st_mode & ~0o020 | 0o002)
    assert ext_cache.built_library(d) is None


@needs_root
def test_only_a_root_owned_sticky_dir_above_the_cache_may_be_world_writable(tmp_path: Path) -> None:
    d = _safe_cache(tmp_path)
    above = tmp_path / "cache"
    above.chmod(0o1777)
    assert ext_cache.built_library(d) == d / "tpx_ext.so"  # like /tmp
    os.chown(above, OTHER_UID, OTHER_UID)
    assert ext_cache.built_library(d) is None
    os.chown(above, 0, 0)
    d.parent.chmod(0o1777)  # the cache root itself: never
    assert ext_cache.built_library(d) is None


@needs_root
@pytest.mark.parametrize("where", ["above", "root", "digest", "library", "ready"])
def test_a_component_owned_by_another_uid_is_refused(tmp_path: Path, where: str) -> None:
    d = _safe_cache(tmp_path)
    path = {"above": tmp_path / "cache", "root": d.parent, "digest": d, "library": d / "tpx_ext.so",
            "ready": d / "READY"}[where]
    os.chown(path, OTHER_UID, OTHER_UID)
    assert ext_cache.built_library(d) is None


@pytest.mark.parametrize("where", ["root", "digest", "library", "ready"])
def test_a_symlink_in_the_cache_is_refused(tmp_path: Path, where: str) -> None:
    d = _safe_cache(tmp_path)
    real = {"root": d.parent, "digest": d, "library": d / "tpx_ext.so", "ready": d / "READY"}[where]
    moved = real.with_name(real.name + ".real")
    real.rename(moved)
    real.symlink_to(moved.name)
    assert (d / "tpx_ext.so").exists()  # the link resolves: only the check stops it
    assert ext_cache.built_library(d) is None


@pytest.mark.parametrize("name", ["../tpx_ext.so", "/tmp/tpx_ext.so", "sub/tpx_ext.so", "tpx_ext.py", ""])
def test_ready_must_name_a_library_beside_it(tmp_path: Path, name: str) -> None:
    d = _safe_cache(tmp_path)
    (d / "sub").mkdir()
    shutil.copy(d / "tpx_ext.so", d / "sub" / "tpx_ext.so")
    shutil.copy(d / "tpx_ext.so", d.parent / "tpx_ext.so")
    (d / "READY").write_text(name + "\n")
    assert ext_cache.built_library(d) is None


@needs_root
def test_a_library_planted_by_an_unshare_run_is_not_loaded_by_the_host(tmp_path: Path) -> None:
    """End to end: a real run at ``--isolation unshare`` (a throw-away uid, the host's filesystem)
    plants ``ferry-tpx-ext-0/<digest>`` in a world-writable sticky dir, as it could in /tmp; a root
    interpreter using that dir as its temp dir, with an empty home cache, must not run it."""
    from sandbox.runspace import mount_support
    from tools.runner.api import run
    from tools.runner.models import RunLimits, RunRequest

    if not mount_support()[0]:
        pytest.skip(f"no run space here: {mount_support()[1]}")
    digest = ext_cache.source_hash()
    marker = tmp_path / "marker"
    repo = tmp_path / "repo"
    repo.mkdir()
    shutil.copy(_planted_library(tmp_path, marker), repo / "plant.so")
    shared = Path(tempfile.mkdtemp(prefix="ferry-test-shared-tmp-", dir="/tmp"))  # reachable by the run's uid
    try:
        shared.chmod(0o1777)
        plant = shared / "ferry-tpx-ext-0" / digest
        (repo / "plant.py").write_text(
            "import os, shutil\n"
            f"os.makedirs({str(plant)!r})\n"
            f"shutil.copy('plant.so', {str(plant / 'tpx_ext.so')!r})\n"
            f"open({str(plant / 'READY')!r}, 'w').write('tpx_ext.so\\n')\n"
            "print('planted by uid', os.getuid())\n")
        res = run(RunRequest(path=repo, command=["python", "plant.py"], device="cpu", isolation="unshare",
                             artifacts_dir=tmp_path / "art", timeout_s=60, limits=RunLimits(disk_bytes=64 * 1024**2)))
        assert res.status == "ok" and res.isolation == "unshare", res.stderr_tail
        assert (plant / "READY").is_file() and (plant / "tpx_ext.so").stat().st_uid not in (0, os.geteuid())

        (tmp_path / "home").mkdir()
        proc = _fresh_python({"HOME": str(tmp_path / "home"), "TMPDIR": str(shared)}, tmp_path, _LOAD)
    finally:
        shutil.rmtree(shared)
    assert not marker.exists(), "the library a sandboxed run planted ran as root on the host"
    assert "ERROR tpx C++ extension is not built yet" in proc.stdout, proc.stderr


@needs_root
def test_an_unprivileged_user_namespace_still_trusts_its_own_cache(tmp_path: Path) -> None:
    """A sandboxed child of an unprivileged Ferry (bwrap --unshare-user) sees root's directories
    (/, /tmp) owned by the overflow uid: above the cache root they count as root's, so its own
    cache below a sticky /tmp is used; one owned by anybody else still is not."""
    if shutil.which("unshare") is None or shutil.which("setpriv") is None:
        pytest.skip("needs util-linux's unshare and setpriv")
    python = Path("/usr/bin/python3")  # the checks are standard library: any interpreter another uid may run
    if not python.is_file():
        pytest.skip("no /usr/bin/python3 for an unprivileged uid (Ferry's interpreter may sit in root's home)")
    uid = OTHER_UID + 1
    base = Path(tempfile.mkdtemp(prefix="ferry-test-userns-", dir="/tmp"))
    try:
        base.chmod(0o755)
        mine, theirs = base / "mine" / "0123456789abcdef", base / "theirs" / "0123456789abcdef"
        _fill(mine, _real_library(), uid=uid)
        _fill(theirs, _real_library(), uid=OTHER_UID)
        code = ("import sys\nfrom pathlib import Path\nfrom backend_autoload import ext_cache, ext_trust\n"
                "assert ext_trust._overflow_uid() is not None, 'not in a user namespace'\n"
                "print([str(ext_cache.built_library(Path(p))) for p in sys.argv[1:]])\n")
        proc = subprocess.run(["setpriv", f"--reuid={uid}", f"--regid={uid}", "--clear-groups", "unshare", "--user",
                               "--map-root-user", str(python), "-c", code, str(mine), str(theirs)],
                              cwd=base, env={**os.environ, "PYTHONPATH": str(ROOT)}, capture_output=True, text=True,
                              timeout=60)
    finally:
        shutil.rmtree(base)
    if proc.returncode != 0 and "unshare failed" in proc.stderr:
        pytest.skip(f"no unprivileged user namespaces here: {proc.stderr.strip()}")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == str([str(mine / "tpx_ext.so"), "None"])
