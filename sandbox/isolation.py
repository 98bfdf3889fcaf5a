"""Which isolation level this machine allows, and the command prefix that enforces it.

Levels, strongest first (the level in force is reported with every result):

``bwrap``    bubblewrap: new mount/pid/net/ipc/uts namespaces, read-only system, Python and
             Ferry trees, the workspace, a private /tmp and /dev/shm the only writable places, no
             network, new session, the child dies with the parent; when Ferry runs as root
             the child drops to a throw-away unprivileged uid (so RLIMIT_NPROC applies).
``unshare``  fallback: rlimits + a private network namespace (``unshare``), process-group
             kill, uid drop when root. The filesystem is NOT hidden: file permissions only.
``rlimits``  weakest fallback: rlimits + process-group kill (+ uid drop when root). Network
             and filesystem are reachable. Chosen only when nothing stronger works.
"""

from __future__ import annotations

import atexit
import hashlib
import logging
import os
import shutil
import stat
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path

logger = logging.getLogger(__name__)

LEVELS: tuple[str, ...] = ("bwrap", "unshare", "rlimits")
ISOLATION_ENV = "FERRY_SANDBOX_ISOLATION"  # force a level: bwrap | unshare | rlimits

# /etc entries the child may read (no shadow, no ssh keys, no machine secrets).
ETC_ALLOW: tuple[str, ...] = (
    "ld.so.cache", "ld.so.conf", "ld.so.conf.d", "localtime", "timezone", "passwd", "group",
    "nsswitch.conf", "host.conf", "alternatives", "ssl", "ca-certificates",
    "os-release", "mime.types", "gai.conf", "protocols", "services",
)
# The sandbox's own /etc/hosts (generated, bound read-only): the host's may be unreadable for the
# run's uid, and `localhost` (torchrun --standalone's rendezvous, gloo's own hostname) must resolve.
SANDBOX_HOSTNAME = "ferry-sandbox"
SANDBOX_HOSTS = (
    f"127.0.0.1\tlocalhost {SANDBOX_HOSTNAME}\n"
    "::1\tlocalhost ip6-localhost ip6-loopback\n"
)
SYSTEM_DIRS: tuple[str, ...] = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32")


class SandboxUnavailable(RuntimeError):
    """The requested isolation level cannot be used on this machine."""


@dataclass(frozen=True)
class IsolationInfo:
    level: str
    reasons: tuple[str, ...] = field(default_factory=tuple)  # why this level, why not stronger
    available: tuple[str, ...] = field(default_factory=tuple)
    drops_uid: bool = False  # runs the child under a throw-away uid (parent is root)
    # bwrap runs (cold and warm) get the seccomp filter of ``sandbox.seccomp``; None: why not
    seccomp_unavailable: str | None = None

    def seccomp_text(self) -> str:
        """What the run's seccomp state is, as results and ``ferry doctor`` say it."""
        if self.level != "bwrap":
            return f"off: the {self.level} level has no seccomp filter (bubblewrap only)"
        if self.seccomp_unavailable:
            return f"off: {self.seccomp_unavailable}"
        return "on: namespaces, mounts, bpf, keyrings, kernel modules, ptrace, perf, userfaultfd refused (EPERM)"

    def describe(self) -> str:
        return f"{self.level} ({'; '.join(self.reasons)})" if self.reasons else self.level


def _is_root() -> bool:
    return os.geteuid() == 0


def _setpriv() -> str | None:
    return shutil.which("setpriv")


def _try(argv: list[str]) -> tuple[bool, str]:
    try:
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=20)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return False, str(exc)
    if proc.returncode == 0:
        return True, ""
    lines = (proc.stderr or proc.stdout or "").strip().splitlines()
    return False, lines[-1] if lines else f"exit status {proc.returncode}"


def python_roots() -> list[Path]:
    """Directories the child needs read-only to run this Python and import torch and Ferry."""
    roots = {Path(sys.prefix).resolve(), Path(sys.base_prefix).resolve(), Path(sys.exec_prefix).resolve()}
    exe = Path(sys.executable)
    roots.add(exe.resolve().parent.parent)
    roots.update(ferry_child_dirs())
    # Remove roots nested in others (bwrap would mount twice).
    ordered = sorted(roots, key=lambda p: len(p.parts))
    kept: list[Path] = []
    for root in ordered:
        if str(root) in ("/", "/usr"):
            continue
        if not any(root == k or k in root.parents for k in kept):
            kept.append(root)
    return kept


def ferry_root() -> Path:
    """The directory holding Ferry's top-level packages (``sandbox/``, ``tools/``...)."""
    return Path(__file__).resolve().parent.parent


# Ferry's packages a sandboxed child imports (its bootstrap ``tools/runner/child``, the CUDA
# redirect and the probe/profile hooks in ``tools/``, which read settings with ``sandbox.envvars``;
# the tpx backend, its autoload entry point, and cuda_semantics, which tpx and the redirect share).
# Only these are bound into the sandbox, never the whole tree: a checkout also holds ``.git``,
# ``ferry-out/`` of earlier runs, state directories.
CHILD_PACKAGES: tuple[str, ...] = ("backend", "backend_autoload", "cuda_semantics", "sandbox", "tools")


def ferry_child_dirs() -> list[Path]:
    """The directories of ``CHILD_PACKAGES`` in this installation (each a real directory)."""
    root = ferry_root()
    out: list[Path] = []
    for name in CHILD_PACKAGES:
        path = root / name
        if path.is_dir() and not path.is_symlink():
            out.append(path)
    return out


def _cache_dir() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "ferry" / "sandbox"


def _ours_alone(path: Path) -> bool:
    """A real directory of this user's that nobody else can write into."""
    st = os.lstat(path)
    return stat.S_ISDIR(st.st_mode) and st.st_uid == os.geteuid() and not st.st_mode & 0o022


@lru_cache(maxsize=1)
def hosts_file() -> Path:
    """The generated hosts file every bubblewrap sandbox gets as /etc/hosts: 0644, in Ferry's cache
    (``$XDG_CACHE_HOME/ferry/sandbox``, else ``~/.cache``), one file per content, made once and then
    reused by every process, so a Ferry that is killed leaves nothing behind. A cache directory that is
    not this user's alone (another owner, group- or world-writable, a link) is not used: then a
    private temporary directory, removed at exit. Never a place a run could write."""
    name = "hosts-" + hashlib.sha256(SANDBOX_HOSTS.encode()).hexdigest()[:12]
    d = _cache_dir()
    try:
        d.mkdir(parents=True, exist_ok=True, mode=0o755)
        if not (_ours_alone(d.parent) and _ours_alone(d)):
            raise PermissionError(f"{d} is not only this user's")
        path = d / name
        try:
            st = os.lstat(path)
            if stat.S_ISREG(st.st_mode) and st.st_uid == os.geteuid() and st.st_mode & 0o777 == 0o644 \
                    and path.read_text() == SANDBOX_HOSTS:
                return path
        except FileNotFoundError:
            pass
        tmp = d / f".{name}.{os.getpid()}"
        tmp.write_text(SANDBOX_HOSTS)
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
        return path
    except OSError as exc:
        logger.debug("sandbox: hosts file outside the cache (%s)", exc)
    tmpdir = Path(tempfile.mkdtemp(prefix="ferry-etc-"))
    os.chmod(tmpdir, 0o755)
    path = tmpdir / "hosts"
    path.write_text(SANDBOX_HOSTS)
    os.chmod(path, 0o644)
    atexit.register(shutil.rmtree, tmpdir, True)
    return path


def bwrap_prefix(
    *,
    workspace: Path,
    writable: list[Path],
    readable: list[Path],
    uid: int | None,
    tmp_bytes: int,
    network: bool = False,
    tmp_dir: Path | None = None,
    shm_dir: Path | None = None,
    chdir: Path | None = None,
    seccomp_fd: int | None = None,
) -> list[str]:
    """The bubblewrap argv (up to and including ``--``) for one run (started in ``chdir``, by
    default ``workspace``).

    /tmp and /dev/shm are ``tmp_dir`` and ``shm_dir`` when given (directories of the run's capped
    space, ``sandbox.runspace``), otherwise tmpfs mounts of bubblewrap's own, ``tmp_bytes`` each.
    ``seccomp_fd``: a descriptor holding the filter (``sandbox.seccomp``), inherited by bubblewrap.
    The command gets no capability in any set: ``--cap-drop ALL``, or, with ``uid``, ``setpriv``
    changing uid and emptying the inheritable, ambient and bounding sets."""
    bwrap = shutil.which("bwrap")
    if bwrap is None:
        raise SandboxUnavailable("bwrap is not installed (apt-get install bubblewrap)")
    argv = [bwrap]
    for d in SYSTEM_DIRS:
        p = Path(d)
        if p.is_symlink():
            argv += ["--symlink", os.readlink(p), d]
        elif p.is_dir():
            argv += ["--ro-bind", d, d]
    # /etc made by bubblewrap for the files bound below would copy the mode of a parent it creates
    # (0700 where the tmpfs root is): traversable, or nothing in it is readable for the child's uid.
    argv += ["--perms", "0755", "--dir", "/etc"]
    for name in ETC_ALLOW:
        argv += ["--ro-bind-try", f"/etc/{name}", f"/etc/{name}"]
    argv += ["--ro-bind", str(hosts_file()), "/etc/hosts"]
    # sysfs read-only: CPU topology for torch/cpuinfo, PCI/net listings gloo walks at init.
    argv += ["--ro-bind-try", "/sys", "/sys"]
    argv += ["--proc", "/proc", "--dev", "/dev"]
    for host_dir, dest in ((shm_dir, "/dev/shm"), (tmp_dir, "/tmp")):
        if host_dir is not None:
            argv += ["--bind", str(host_dir), dest]
        else:
            argv += ["--size", str(int(tmp_bytes)), "--perms", "1777", "--tmpfs", dest]
    made: set[str] = {"/", "/tmp", "/dev", "/proc", "/usr", "/etc"}

    def parents(dest: Path) -> list[str]:
        # Intermediate directories bwrap would create copy the host's mode (``/root`` is 0700);
        # make them traversable so the unprivileged child can reach what is bound below them.
        out: list[str] = []
        for parent in reversed(dest.parents):
            if any(parent == b or b in parent.parents for b in bound):
                continue  # exists inside a tree already mounted (possibly read-only)
            if str(parent) not in made:
                made.add(str(parent))
                out += ["--perms", "0755", "--dir", str(parent)]
        return out

    bound: list[Path] = []
    for root in python_roots() + [p.resolve() for p in readable]:
        argv += [*parents(root), "--ro-bind", str(root), str(root)]
        bound.append(root)
    for p in [workspace, *writable]:
        rp = Path(p).resolve()
        # mounted after the read-only trees, so a workspace inside one of them is writable
        argv += [*parents(rp), "--bind", str(rp), str(rp)]
        bound.append(rp)
    argv += ["--chdir", str(Path(chdir or workspace).resolve())]
    argv += ["--unshare-pid", "--unshare-ipc", "--unshare-uts", "--unshare-cgroup-try"]
    if not network:
        argv += ["--unshare-net"]
    # The hostname resolves through the sandbox's own /etc/hosts (hosts_file), so code that looks its
    # own hostname up (torch.distributed, gloo) finds the loopback interface of the private network namespace.
    argv += ["--hostname", SANDBOX_HOSTNAME, "--new-session", "--die-with-parent"]
    if seccomp_fd is not None:
        argv += ["--seccomp", str(seccomp_fd)]
    if uid is not None:
        # bubblewrap keeps root's capabilities for its own setup (--chdir into the run's chowned dirs);
        # setpriv empties every set as it changes uid, before the command runs
        argv += ["--cap-add", "CAP_SETUID", "--cap-add", "CAP_SETGID", "--"]
        argv += drop_uid_prefix(uid)
    else:
        if not _is_root():
            argv.insert(1, "--unshare-user")
        argv += ["--cap-drop", "ALL", "--"]
    return argv


_CAP_SETS = ("--inh-caps=-all", "--ambient-caps=-all")


def drop_uid_prefix(uid: int) -> list[str]:
    """``setpriv`` to ``uid`` with every capability set empty (inheritable, ambient, bounding; the
    uid change empties permitted and effective) and no new privileges."""
    setpriv = _setpriv()
    if setpriv is None:
        raise SandboxUnavailable("setpriv (util-linux) is needed to drop root privileges")
    return [setpriv, f"--reuid={uid}", f"--regid={uid}", "--clear-groups", *_CAP_SETS, "--bounding-set=-all",
            "--no-new-privs", "--"]


def drop_caps_prefix(*, bounding: bool) -> list[str]:
    """``setpriv`` emptying the capability sets without a uid change (the weaker levels when Ferry
    is not root; ``bounding``: inside ``unshare --map-root-user``, where the child may drop it, and
    where an empty bounding set leaves the namespace's root no capability after exec)."""
    setpriv = _setpriv()
    if setpriv is None:
        return []
    return [setpriv, *_CAP_SETS, *(["--bounding-set=-all"] if bounding else []), "--no-new-privs", "--"]


def unshare_prefix() -> list[str]:
    unshare = shutil.which("unshare")
    if unshare is None:
        raise SandboxUnavailable("unshare (util-linux) is not installed")
    return [unshare, "--net", "--"] if _is_root() else [unshare, "--net", "--map-root-user", "--"]


@lru_cache(maxsize=1)
def detect() -> IsolationInfo:
    """Probe what works here (cached for the process)."""
    reasons: list[str] = []
    available: list[str] = []
    seccomp_off: str | None = None
    root = _is_root()
    drops = root and _setpriv() is not None
    if root and not drops:
        reasons.append("running as root without setpriv: the child keeps uid 0, process limits do not apply")
    if shutil.which("bwrap") is None:
        reasons.append("bwrap not installed (apt-get install bubblewrap)")
    else:
        probe_dir = Path(os.environ.get("TMPDIR", "/tmp"))
        uid = 65534 if drops else None
        argv = bwrap_prefix(workspace=probe_dir, writable=[], readable=[], uid=uid, tmp_bytes=16 * 1024**2)
        ok, why = _try([*argv, "/bin/true"])
        if ok:
            available.append("bwrap")
            seccomp_off = _probe_seccomp(probe_dir, uid)
        else:
            reasons.append(f"bwrap cannot create its namespaces here: {why}")
    if shutil.which("unshare"):
        argv = unshare_prefix() + (drop_uid_prefix(65534) if drops else []) + ["/bin/true"]
        ok, why = _try(argv)
        if ok:
            available.append("unshare")
        else:
            reasons.append(f"unshare --net not permitted: {why}")
    else:
        reasons.append("unshare not installed")
    available.append("rlimits")
    level = available[0]
    if level != "bwrap":
        logger.warning("sandbox: bubblewrap unavailable, using weaker isolation %r: %s", level, "; ".join(reasons))
    if seccomp_off and level == "bwrap":
        logger.warning("sandbox: bubblewrap runs without a seccomp filter: %s", seccomp_off)
    return IsolationInfo(level=level, reasons=tuple(reasons), available=tuple(available), drops_uid=drops,
                         seccomp_unavailable=seccomp_off)


def _probe_seccomp(probe_dir: Path, uid: int | None) -> str | None:
    """None when bubblewrap accepts the filter here, else why the runs go without it."""
    from sandbox import seccomp

    program = seccomp.filter_program()
    if program is None:
        return seccomp.unavailable_reason()
    fd = seccomp.filter_fd(program)
    try:
        argv = bwrap_prefix(workspace=probe_dir, writable=[], readable=[], uid=uid, tmp_bytes=16 * 1024**2,
                            seccomp_fd=fd)
        try:
            proc = subprocess.run([*argv, "/bin/true"], capture_output=True, text=True, timeout=20, pass_fds=(fd,))
        except (OSError, subprocess.TimeoutExpired) as exc:
            return f"bubblewrap refused the seccomp filter: {exc}"
        if proc.returncode != 0:
            lines = (proc.stderr or "").strip().splitlines()
            return f"bubblewrap refused the seccomp filter: {lines[-1] if lines else proc.returncode}"
        return None
    finally:
        os.close(fd)


def choose(requested: str | None = None) -> IsolationInfo:
    """Resolve the level for a run: explicit request > ``FERRY_SANDBOX_ISOLATION`` > best available."""
    info = detect()
    want = requested or os.environ.get(ISOLATION_ENV) or "auto"
    if want == "auto":
        return info
    if want not in LEVELS:
        raise SandboxUnavailable(f"unknown isolation level {want!r}; use one of auto, {', '.join(LEVELS)}")
    if want not in info.available:
        why = "; ".join(info.reasons) or "probe failed"
        raise SandboxUnavailable(f"isolation {want!r} is not available here: {why}")
    reasons = info.reasons
    if want != info.level:
        reasons = (f"{want} chosen explicitly (best available: {info.level})", *reasons)
    return IsolationInfo(level=want, reasons=tuple(reasons), available=info.available, drops_uid=info.drops_uid,
                         seccomp_unavailable=info.seccomp_unavailable)
