"""``ferry doctor``: which sandbox isolation level is in force and why, plus torch/tpx status."""

from __future__ import annotations

import argparse
import json
from typing import Any

NAME = "doctor"
HELP = "show the sandbox isolation level in force (and why), and torch / tpx status"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--json", action="store_true", help="machine-readable output")


def collect() -> dict[str, Any]:
    """The facts ``ferry doctor`` (and ``ferry run --check``) report."""
    import os
    import shutil
    import subprocess
    import sys

    from sandbox.isolation import ISOLATION_ENV, choose, detect
    from sandbox.workspace import default_root, reflink_supported

    info = detect()
    forced = os.environ.get(ISOLATION_ENV)
    in_force = info
    error = None
    if forced:
        try:
            in_force = choose(forced)
        except Exception as exc:
            error = str(exc)
    report: dict[str, Any] = {
        "isolation": {
            "level": in_force.level,
            "available": list(info.available),
            "reasons": list(in_force.reasons),
            "forced_by_env": forced,
            "error": error,
            "drops_uid": info.drops_uid,
            "bwrap": shutil.which("bwrap"),
        },
        "workspace": {"root": str(default_root()), "copy_on_write": reflink_supported(str(default_root()))},
        "python": sys.version.split()[0],
    }
    from sandbox import hostmem

    report["isolation"]["seccomp"] = in_force.seccomp_text()
    report["host_defaults"] = hostmem.current().to_dict()
    report["disk"] = disk_check(in_force.level)
    report["resource_control"] = resource_check()
    report["warm_start"] = warm_check(in_force.level)
    # torch and tpx in a child: importing torch here would slow every doctor call and a broken
    # backend must not take the report down with it.
    probe = (
        "import json, torch\n"
        "out = {'torch': torch.__version__}\n"
        "try:\n"
        "    import backend\n"
        "    out['tpx'] = bool(getattr(torch, 'tpx', None) and torch.tpx.is_available())\n"
        "    out['tpx_device_count'] = torch.tpx.device_count() if out['tpx'] else 0\n"
        "except Exception as exc:\n"
        "    out['tpx'] = False\n"
        "    out['tpx_error'] = f'{type(exc).__name__}: {exc}'\n"
        "print(json.dumps(out))\n"
    )
    try:
        # -P: Ferry's own backend, never a backend/ in the caller's working directory
        proc = subprocess.run([sys.executable, "-P", "-c", probe], capture_output=True, text=True, timeout=120)
        lines = proc.stdout.strip().splitlines()
        report["torch"] = json.loads(lines[-1]) if proc.returncode == 0 and lines else {
            "error": (proc.stderr.strip().splitlines() or ["torch import failed"])[-1]}
    except (subprocess.TimeoutExpired, ValueError) as exc:
        report["torch"] = {"error": str(exc)}
    return report


def disk_check(level: str) -> dict[str, Any]:
    """How each run's writes are capped here: one tmpfs in all where Ferry may mount, else per area."""
    from sandbox.limits import Limits, disk_limit_from_env
    from sandbox.runspace import describe_disk_cap, mount_support

    mounted, why = mount_support()
    error = None
    try:
        cap = disk_limit_from_env()
    except ValueError as exc:
        cap, error = None, f"{exc}: every run refuses to start until it is a size (e.g. 4G) or unset"
    limits = Limits() if cap is None else Limits(disk_bytes=cap)
    return {"mode": "tmpfs" if mounted else "per_area", "cap_bytes": limits.disk_bytes,
            "describe": describe_disk_cap(mounted, why or None, level, limits), "reason": why or None, "error": error}


def resource_check() -> dict[str, Any]:
    """Whether memory and processes are capped for a whole run (cgroups) or per process (rlimits)."""
    from sandbox.cgroups import describe_limits, detect_control
    from sandbox.limits import Limits

    info = detect_control()
    limits = Limits()
    return {"level": info.level, "reasons": list(info.reasons),
            "describe": describe_limits(info.level, limits.run_memory_bytes, limits.run_processes)}


def warm_check(level: str) -> dict[str, Any]:
    """Start a warm interpreter (nothing preloaded) and fork one sandboxed run from it: whether
    warm starts work on this machine, and why not when they do not."""
    import os
    import sys
    import tempfile
    from pathlib import Path

    from sandbox import WarmServer, WarmStart, python_spec, run_in_sandbox
    from sandbox.env import scrubbed_env
    from sandbox.execute import RUN_MARKER_ENV
    from tools.runner.env import child_path_env
    from tools.runner.warm import WARM_ENV, enabled

    if not enabled():
        return {"enabled": False, "works": False, "reason": f"turned off by {WARM_ENV}={os.environ.get(WARM_ENV)}"}
    if level != "bwrap":
        return {"enabled": True, "works": False,
                "reason": f"warm starts need bubblewrap; isolation in force is {level}"}
    path = child_path_env()
    server = WarmServer(scrubbed_env(dict(os.environ), {}, path=path), [], dynamic_keys=frozenset({RUN_MARKER_ENV}))
    try:
        with tempfile.TemporaryDirectory(prefix="ferry-doctor-") as tmp:
            (Path(tmp) / "probe.py").write_text("print(6 * 7)\n")
            spec = python_spec("python probe.py", path, sys.executable)
            assert spec is not None
            res = run_in_sandbox(["/bin/sh", "-c", "python probe.py"], Path(tmp), path_env=path,
                                 warm=WarmStart(server, spec))
    finally:
        server.close()
    works = res.warm and res.status == "ok" and res.stdout.strip() == "42"
    reason = None if works else (res.warm_fallback or f"the warm run ended {res.status}: {res.stderr.strip()[-300:]}")
    return {"enabled": True, "works": works, "reason": reason}


def render(report: dict[str, Any]) -> str:
    iso = report["isolation"]
    strength = " (strongest)" if iso["level"] == "bwrap" else " (WEAKER FALLBACK)"
    lines = [f"sandbox isolation: {iso['level']}{strength}"]
    if iso["level"] == "bwrap":
        lines.append("  bubblewrap: no network, read-only system/Python/Ferry's runtime packages, only the "
                     "workspace and a private /tmp writable,")
        uid = ", child runs under a throw-away uid" if iso["drops_uid"] else ""
        lines.append(f"  pid/ipc/uts namespaces, new session, rlimits, whole-tree kill{uid}")
    if iso.get("seccomp"):
        lines.append(f"  seccomp filter: {iso['seccomp']}")
        lines.append("  capabilities: every set empty (inheritable, permitted, effective, bounding, ambient)")
    lines.append(f"  available levels: {', '.join(iso['available'])}")
    for reason in iso["reasons"]:
        lines.append(f"  - {reason}")
    if iso.get("forced_by_env"):
        lines.append(f"  forced by FERRY_SANDBOX_ISOLATION={iso['forced_by_env']}")
    if iso.get("error"):
        lines.append(f"  error: {iso['error']}")
    host = report.get("host_defaults") or {}
    if host:
        lines.append(f"per-run defaults (follow the host): {host['describe']}")
    disk = report.get("disk") or {}
    if disk:
        weaker = " (WEAKER: per area)" if disk["mode"] != "tmpfs" else ""
        lines.append(f"disk cap per run: {disk['describe']}{weaker}")
        if disk.get("error"):
            lines.append(f"  error: {disk['error']}")
    control = report.get("resource_control") or {}
    if control:
        weaker = " (WEAKER)" if control["level"] == "rlimits" else ""
        lines.append(f"resource control: {control['describe']}{weaker}")
        for reason in control.get("reasons") or []:
            lines.append(f"  - {reason}")
    warm = report.get("warm_start") or {}
    if warm.get("works"):
        lines.append("warm starts: on (runs fork from an interpreter that imported torch once, in the same sandbox)")
    elif warm:
        lines.append(f"warm starts: OFF, runs start cold (a torch import, ~2 s, each): {warm.get('reason')}")
    ws = report["workspace"]
    if (report.get("disk") or {}).get("mode") == "tmpfs":
        lines.append(f"workspace copies: plain copies into each run's tmpfs under {ws['root']}")
    else:
        how = "copy-on-write reflinks" if ws["copy_on_write"] else "plain copies: this filesystem has no reflinks"
        lines.append(f"workspace copies: {ws['root']} ({how})")
    t = report.get("torch", {})
    if "error" in t:
        lines.append(f"torch: ERROR {t['error']}")
    else:
        lines.append(f"torch: {t.get('torch')}")
        if t.get("tpx"):
            count = t.get("tpx_device_count")
            lines.append(f"tpx: available ({count} device{'' if count == 1 else 's'})")
        else:
            lines.append(f"tpx: NOT available ({t.get('tpx_error', 'backend did not register tpx')})")
    return "\n".join(lines)


def run(args: argparse.Namespace) -> int:
    report = collect()
    if args.json:
        print(json.dumps(report, indent=2))
    else:
        print(render(report))
    ok = (report["isolation"]["error"] is None and "error" not in report.get("torch", {})
          and not (report.get("disk") or {}).get("error"))
    return 0 if ok else 1
