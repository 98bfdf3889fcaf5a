#!/usr/bin/env python3
"""Whether a Ferry migration is done: exit 0 only for a result.json that says `migrated`, whose last target run
and last test run (when it has a test command) ended ok and whose parity passed; otherwise print why, exit 1.
A file that is not a Ferry result.json exits 2. Standard library only.

    verdict.py ferry-out/result.json
"""

from __future__ import annotations

import json
import sys
from typing import Any


def _fail(code: int, why: str) -> int:
    print(why)
    return code


def _last(runs: list[Any], kind: str) -> dict[str, Any] | None:
    found = [r for r in runs if isinstance(r, dict) and r.get("kind") == kind]
    return found[-1] if found else None


def judge(record: Any) -> tuple[int, str]:
    if not isinstance(record, dict) or not isinstance(record.get("status"), str) \
            or not isinstance(record.get("run_log"), list) or not isinstance(record.get("parity"), dict):
        return 2, "not a Ferry result.json (status, run_log and parity are missing or of the wrong type)"
    status = record["status"]
    if status != "migrated":
        return 1, f"not done: Ferry's status is {status!r}: {record.get('summary') or 'see report.md'}"
    target = _last(record["run_log"], "target")
    if target is None or target.get("status") != "ok":
        return 1, "not done: no target run on the device ended ok"
    if record.get("test_command"):
        tests = _last(record["run_log"], "tests")
        if tests is None or tests.get("status") != "ok":
            return 1, "not done: the tests did not pass on the device"
    if record["parity"].get("passed") is not True:
        return 1, f"not done: parity did not pass ({record['parity'].get('verdict')})"
    return 0, "migrated: the program ran on the device" + (", the tests passed" if record.get("test_command")
                                                           else "") + " and parity passed"


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        return _fail(2, "usage: verdict.py RESULT_JSON")
    try:
        with open(argv[1], encoding="utf-8") as fh:
            record = json.load(fh)
    except (OSError, ValueError) as exc:
        return _fail(2, f"cannot read {argv[1]}: {exc}")
    code, why = judge(record)
    return _fail(code, why)


if __name__ == "__main__":
    sys.exit(main(sys.argv))
