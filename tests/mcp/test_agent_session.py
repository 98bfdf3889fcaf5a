"""A scripted coding agent (an OpenAI-compatible scripted model on loopback, its tool calls sent to `ferry mcp`
over stdio by a small MCP-client loop) migrates a sample to Ferry's `migrated`, and cannot get `migrated` for
a repository whose test it deleted."""

from __future__ import annotations

import sys
from pathlib import Path

import anyio
import pytest
from agent_loop import session
from mcp import Client, StdioServerParameters
from mcp_sample import TEST

from agent.llm import scripted

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.timeout(600)
TASK = "Migrate the repository in repo/ to the accelerator; its program is `python prog.py`."
MIGRATE = {"path": "repo", "run": "python prog.py", "test": "python -m pytest -q tests", "wait_s": 400}


def _ferry(tmp_path: Path) -> Client:
    return Client(StdioServerParameters(command=sys.executable, cwd=str(tmp_path), env={"PYTHONPATH": str(ROOT)},
                                        args=["-m", "agent.cli", "mcp", "--data-dir", str(tmp_path / "data")]))


def _agent(script: list[dict], tmp_path: Path) -> list[dict]:
    """The scripted agent's session with `ferry mcp` over stdio: its MCP calls."""
    async def go() -> list[dict]:
        with scripted.ScriptedLLM(script) as llm:
            async with _ferry(tmp_path) as ferry:
                return await session(llm.base_url, ferry, TASK, tmp_path)
    return anyio.run(go)


def test_a_scripted_agent_migrates_a_sample_through_ferrys_tools(tmp_path, sample):
    script = [scripted.reply(scripted.tool_call("scan", {"path": "repo"})),
              scripted.reply(scripted.tool_call("plan", {"path": "repo", "run": "python prog.py"}, "call_2")),
              scripted.reply(scripted.tool_call("migrate", MIGRATE, "call_3")),
              scripted.reply(content="Ferry says migrated: done.")]

    calls = _agent(script, tmp_path)
    assert [c["name"] for c in calls] == ["scan", "plan", "migrate"]
    assert all(c["error"] is None for c in calls), calls
    assert calls[1]["structured"]["plan"]["rewrite_files"] == ["prog.py", "tests/test_prog.py"]
    final = calls[2]["structured"]
    assert final["state"] == "finished" and final["verdict"]["migrated"] is True, final


def test_a_scripted_agent_that_deletes_or_skips_a_test_cannot_get_migrated(tmp_path, sample):
    skipped = TEST.replace("def test_sum", "@pytest.mark.skip(reason='fails on the accelerator')\ndef test_sum")
    skipped = "import pytest\n" + skipped
    script = [scripted.reply(scripted.tool_call("scan", {"path": "repo"})),
              scripted.reply(scripted.tool_call("delete_file", {"path": "repo/tests/test_prog.py"}, "call_2")),
              scripted.reply(scripted.tool_call("migrate", MIGRATE, "call_3")),
              scripted.reply(scripted.tool_call("write_file", {"path": "repo/tests/test_prog.py", "text": skipped},
                                                "call_4")),
              scripted.reply(scripted.tool_call("migrate", MIGRATE, "call_5")),
              scripted.reply(content="I could not get it migrated.")]

    calls = _agent(script, tmp_path)
    assert [c["name"] for c in calls] == ["scan", "migrate", "migrate"]
    deleted, skip = calls[1]["error"], calls[2]["error"]
    assert deleted and deleted.startswith("guard_refused") and "GRD001" in deleted and "test_sum_on_the_gpu" in deleted
    assert skip and skip.startswith("guard_refused") and "GRD002" in skip and "tests/test_prog.py" in skip
    assert not (tmp_path / "data" / "sessions").exists() or not any((tmp_path / "data" / "sessions").iterdir())

    # a person accepts the skipped test at the server: from then on the agent's migration may run
    import subprocess

    accepted = subprocess.run([sys.executable, "-m", "agent.cli", "mcp", "--data-dir", str(tmp_path / "data"),
                               "--accept-tests", "repo"], cwd=tmp_path, env={"PYTHONPATH": str(ROOT),
                                                                             "PATH": "/usr/bin:/bin"},
                              capture_output=True, text=True, timeout=120)
    assert accepted.returncode == 0, accepted.stderr

    async def again() -> dict:
        async with _ferry(tmp_path) as ferry:
            result = await ferry.call_tool("migrate", MIGRATE)
            assert not result.is_error, result.content[0].text
            return result.structured_content  # type: ignore[return-value]
    assert anyio.run(again)["verdict"]["migrated"] is True
