"""Regenerate the golden traces by REAL sandboxed runs: python tests/runner/golden/make_goldens.py

Each case in cases/ runs through tools.runner.api.run on CPU; its stderr, stdout, junit XML
and the workspace root the child saw are stored under out/<case>/ for test_trace_golden.py.
"""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parents[2]))

from tools.runner.api import run  # noqa: E402
from tools.runner.models import RunLimits, RunRequest  # noqa: E402

COMMANDS = {
    "test_pytest_fail": ["python", "-m", "pytest", "-q", "test_pytest_fail.py"],
    "test_pytest_fail_native": ["python", "-m", "pytest", "-q", "--tb=native", "test_pytest_fail.py"],
}


def main() -> None:
    out_root = HERE / "out"
    shutil.rmtree(out_root, ignore_errors=True)
    names = [p.stem for p in sorted((HERE / "cases").glob("*.py"))] + ["test_pytest_fail_native"]
    for name in names:
        cmd = COMMANDS.get(name, ["python", f"{name}.py"])
        tpx = name.startswith("tpx_") or name == "mixed_devices"
        env = {"TPX_MEMORY_CAPACITY": "1GiB", "TPX_STRICT": "1"} if tpx else {}
        res = run(RunRequest(path=HERE / "cases", command=cmd, device="tpx" if tpx else "cpu", timeout_s=120, env=env,
                             limits=RunLimits(memory_bytes=2 * 1024**3) if name == "memory_error" else RunLimits()))
        # The workspace path the child saw is in the command's cwd; recover it from a frame.
        dest = out_root / name
        dest.mkdir(parents=True)
        (dest / "stderr.txt").write_text(res.stderr_tail)
        (dest / "stdout.txt").write_text(res.stdout_tail)
        if res.junit_xml:
            shutil.copy(res.junit_xml, dest / "junit.xml")
        meta = {"status": res.status, "exit_code": res.exit_code, "workspace": _workspace_of(res.stderr_tail + res.stdout_tail)}
        (dest / "meta.json").write_text(json.dumps(meta, indent=2))
        print(name, res.status, meta["workspace"])


def _workspace_of(text: str) -> str | None:
    import re

    m = re.search(r"(/[^\s\"']*/ferry-ws-[^/]+/cases)/", text)
    return m.group(1) if m else None


if __name__ == "__main__":
    main()
