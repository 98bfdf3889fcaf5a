"""`ferry mcp` over stdio, driven by the MCP SDK's own client: the tools' schemas are the models', and an agent
can scan, rewrite, run, check and migrate a sample, follow the migration's progress, cancel one and read its patch."""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp import Client, StdioServerParameters
from mcp.shared.exceptions import MCPError

from agent.mcp.tools import TOOLS

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.timeout(600)


def _server(tmp_path: Path, *flags: str) -> StdioServerParameters:
    return StdioServerParameters(command=sys.executable, cwd=str(tmp_path),
                                 args=["-m", "agent.cli", "mcp", "--data-dir", str(tmp_path / "data"), *flags],
                                 env={"PYTHONPATH": str(ROOT)})


async def _call(client: Client, name: str, args: dict[str, Any], **kw: Any) -> Any:
    result = await client.call_tool(name, args, **kw)
    assert not result.is_error, result.content[0].text
    return result.structured_content


def test_tools_list_the_models_schemas_and_refuse_paths_outside_the_allowed_roots(tmp_path, sample):
    async def go() -> None:
        async with Client(_server(tmp_path, "--max-text", "1000")) as client:
            listed = {t.name: t for t in (await client.list_tools()).tools}
            assert set(listed) == set(TOOLS)
            for name, spec in TOOLS.items():
                assert listed[name].input_schema == spec.args.model_json_schema(), name
                assert listed[name].output_schema == spec.result.model_json_schema(), name
            refused = await client.call_tool("scan", {"path": "/etc"})
            assert refused.is_error and "not under an allowed root" in refused.content[0].text
            bad = await client.call_tool("run", {"path": str(sample), "command": "true", "device": "gpu"})
            assert bad.is_error and "device" in bad.content[0].text
            # a text over the limit is cut, with the URI of the whole result, which reads back as it was
            scan = await client.call_tool("scan", {"path": str(sample)})
            text = scan.content[0].text
            uri = text.rsplit("read the resource ", 1)[1].split(" ", 1)[0]
            assert len(text) < 1200 and uri.startswith("ferry://calls/scan-")
            whole = await client.read_resource(uri)
            assert json.loads(whole.contents[0].text) == scan.structured_content
    anyio.run(go)


def test_scan_rewrite_run_check_on_a_suite_sample(tmp_path):
    repo = tmp_path / "mlp"
    shutil.copytree(ROOT / "evals" / "suite" / "mlp_training" / "repo", repo)

    async def go() -> None:
        async with Client(_server(tmp_path)) as client:
            scan = await _call(client, "scan", {"path": str(repo)})
            rules = {f["rule_id"] for f in scan["findings"]}
            assert {"FRY001", "FRY013"} <= rules and {f["file"] for f in scan["findings"]} >= {"train.py"}
            before = (repo / "train.py").read_text()
            diff = await _call(client, "rewrite", {"path": str(repo)})
            assert "-device = torch.device(\"cuda\")" in diff["diff"] and (repo / "train.py").read_text() == before
            await _call(client, "rewrite", {"path": str(repo), "write": True})
            assert (repo / "train.py").read_text() != before  # written only when asked
            run = await _call(client, "run", {"path": str(repo), "command": ["python", "train.py", "--steps", "4"],
                                              "redirect_cuda": False})
            assert run["status"] == "ok" and "step 3" in run["stdout_tail"], run["stderr_tail"]
            args = {"path": str(repo), "command": "python train.py --steps 4", "profile": False}
            check = await _call(client, "check", args)
            # tpx multiplies float32 in reduced precision by default, as CUDA's TF32 does: the first divergence
            # names the cause, and the check with that cause taken away passes
            assert check["status"] == "fail" and "matmul_precision" in check["summary"], check["summary"]
            assert check["reference"]["status"] == "ok" and check["target"]["status"] == "ok"
            exact = await _call(client, "check", {**args, "target_env": {"TPX_MATMUL_PRECISION": "highest"}})
            assert exact["status"] in ("pass", "warn"), exact["summary"]
    anyio.run(go)


def test_a_migration_task_reports_progress_is_cancelled_and_another_is_read_back(tmp_path, sample):
    progress: list[str] = []

    async def on_progress(value: float, total: float | None, message: str | None) -> None:
        progress.append(message or "")

    async def go() -> None:
        async with Client(_server(tmp_path, "--workers", "1")) as client:
            args = {"path": str(sample), "run": "python prog.py", "test": "python -m pytest -q tests"}
            first = await _call(client, "migrate", {**args, "wait_s": 0})
            stopped = await _call(client, "cancel", {"id": first["id"]})
            assert stopped["state"] in ("cancelled", "running", "queued"), stopped
            gone = await _call(client, "status", {"id": first["id"], "wait_s": 60})
            assert gone["state"] == "cancelled" and gone["verdict"]["migrated"] is False, gone

            done = await _call(client, "migrate", {**args, "wait_s": 400}, progress_callback=on_progress)
            assert done["state"] == "finished", done
            assert done["verdict"] == {"status": "migrated", "migrated": True, "stale": False,
                                       "reason": "the program ran on the device, the tests passed and parity passed"}
            assert any(m.startswith("target_run") for m in progress) and any(m.startswith("tests") for m in progress)
            patch = await client.read_resource(f"ferry://migrations/{done['id']}/patch")
            assert "+++ b/prog.py" in patch.contents[0].text
            files = json.loads((await client.read_resource(f"ferry://migrations/{done['id']}/files")).contents[0].text)
            assert "prog.py" in files and 'torch.device("cuda")' not in files["prog.py"]
            runs = json.loads((await client.read_resource(f"ferry://migrations/{done['id']}/runs")).contents[0].text)
            assert {"reference", "target", "tests"} <= {r["kind"] for r in runs}
            assert all(r["status"] == "ok" for r in runs if r["kind"] in ("target", "tests"))
            with pytest.raises(MCPError, match="no migration"):
                await client.read_resource("ferry://migrations/s-nope/patch")
            site = await _call(client, "explain", {"id": done["id"], "file": "prog.py", "line": 3})
            assert "FRY001" in site["text"], site
            rule = await _call(client, "explain", {"rule": "fry13"})
            assert rule["text"].startswith("FRY013") and rule["docs"][0].endswith("idioms.md#fry013")

            # the agent edits the repository after the verdict: it no longer covers the tree
            (sample / "prog.py").write_text((sample / "prog.py").read_text() + "\nprint('edited')\n")
            stale = await _call(client, "status", {"id": done["id"]})
            assert stale["verdict"]["stale"] is True and stale["verdict"]["migrated"] is False
            assert "call `migrate` again" in stale["verdict"]["reason"]
    anyio.run(go)


def test_a_cancelled_call_stops_its_run(tmp_path, sample):
    (sample / "slow.py").write_text("import time\ntime.sleep(120)\n")

    async def go() -> None:
        async with Client(_server(tmp_path, "--concurrent-runs", "1")) as client:
            with anyio.move_on_after(8):
                await client.call_tool("run", {"path": str(sample), "command": ["python", "slow.py"]})
                raise AssertionError("the slow run returned before it was cancelled")
            # the one run slot comes free once the cancelled run has stopped (long before its 120 s)
            with anyio.fail_after(60):
                while True:
                    quick = await client.call_tool("run", {"path": str(sample), "command": ["true"]})
                    if not quick.is_error:
                        break
                    assert "in flight already" in quick.content[0].text, quick.content[0].text
                    await anyio.sleep(0.5)
    anyio.run(go)


def test_a_call_past_the_servers_time_limit_is_stopped_and_said(tmp_path, sample):
    (sample / "slow.py").write_text("import time\ntime.sleep(120)\n")

    async def go() -> None:
        async with Client(_server(tmp_path, "--call-timeout", "5")) as client:
            with anyio.fail_after(90):
                slow = await client.call_tool("run", {"path": str(sample), "command": ["python", "slow.py"]})
            assert slow.is_error and "longer than this server's 5 s per call" in slow.content[0].text
    anyio.run(go)
