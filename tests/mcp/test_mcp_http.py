"""/mcp on `ferry serve` over streamable HTTP, driven by the MCP SDK's client: no token, no answer; a
migration is its owner's alone, and reads back as a resource."""

from __future__ import annotations

from typing import Any

import anyio
import httpx
import httpx2
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError
from service_client import TOKENS

pytestmark = pytest.mark.timeout(600)


def _client(url: str, owner: str) -> Client:
    http = httpx2.AsyncClient(headers={"authorization": f"Bearer {TOKENS[owner]}"},
                              timeout=httpx2.Timeout(60, read=600))
    return Client(streamable_http_client(f"{url}/mcp", http_client=http))


async def _call(client: Client, name: str, args: dict[str, Any]) -> Any:
    result = await client.call_tool(name, args)
    assert not result.is_error, result.content[0].text
    return result.structured_content


def test_mcp_over_http_needs_a_token_and_keeps_owners_apart(serve, tmp_path, sample):
    server = serve("--allow-root", str(sample.parent), "--workers", "1")
    hello = {"jsonrpc": "2.0", "id": 1, "method": "initialize",
             "params": {"protocolVersion": "2025-06-18", "capabilities": {},
                        "clientInfo": {"name": "t", "version": "0"}}}
    headers = {"accept": "application/json, text/event-stream"}
    bare = httpx.post(f"{server.url}/mcp", json=hello, headers=headers, timeout=30)
    assert bare.status_code == 401 and "Bearer" in bare.headers["www-authenticate"]
    wrong = httpx.post(f"{server.url}/mcp", json=hello, headers={**headers, "authorization": "Bearer nope-nope-nope"},
                       timeout=30)
    assert wrong.status_code == 401 and "wrong bearer token" in wrong.text

    async def go() -> None:
        async with _client(server.url, "alice") as alice:
            tools = {t.name for t in (await alice.list_tools()).tools}
            assert {"scan", "migrate", "status", "cancel", "knowledge_search"} <= tools
            done = await _call(alice, "migrate", {"path": str(sample), "run": "python prog.py", "wait_s": 400})
            assert done["state"] == "finished" and done["verdict"]["migrated"] is True, done
            patch = await alice.read_resource(f"ferry://migrations/{done['id']}/patch")
            assert "+++ b/prog.py" in patch.contents[0].text
            listed = {str(r.uri) for r in (await alice.list_resources()).resources}
            assert f"ferry://migrations/{done['id']}/report" in listed
            refused = await alice.call_tool("rewrite", {"path": str(sample), "write": True})
            assert refused.is_error and "only a local server" in refused.content[0].text
        async with _client(server.url, "bob") as bob:
            other = await bob.call_tool("status", {"id": done["id"]})
            assert other.is_error and "no migration" in other.content[0].text
            with pytest.raises(MCPError, match="no migration"):
                await bob.read_resource(f"ferry://migrations/{done['id']}/patch")
            assert not (await bob.list_resources()).resources
        # the same session is the service's: alice sees it through the sessions API too
        seen = server.client.get(f"/v1/sessions/{done['id']}").json()
        assert seen["status"] == "migrated" and seen["owner"] == "alice"
    anyio.run(go)


def test_ferry_mcp_http_serves_only_mcp_behind_the_tokens(tmp_path, sample):
    import json
    import os
    import signal
    import subprocess
    import sys

    env = {**os.environ, "FERRY_API_TOKENS": ",".join(f"{o}={t}" for o, t in TOKENS.items())}
    proc = subprocess.Popen([sys.executable, "-m", "agent.cli", "mcp", "--http", "--port", "0", "--json",
                             "--data-dir", str(tmp_path / "data"), "--allow-root", str(sample.parent)],
                            env=env, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
                            start_new_session=True)
    try:
        url = json.loads(proc.stdout.readline())["url"]  # type: ignore[union-attr]

        async def go() -> None:
            with anyio.fail_after(120):
                while True:  # bound before uvicorn accepts
                    try:
                        if httpx.post(f"{url}/mcp", json={}, timeout=5).status_code == 401:
                            break
                    except httpx.TransportError:
                        await anyio.sleep(0.2)
            assert httpx.get(f"{url}/v1/sessions", timeout=5).status_code == 404  # no sessions API here
            async with _client(url, "alice") as alice:
                scan = await _call(alice, "scan", {"path": str(sample)})
                assert {f["file"] for f in scan["findings"]} >= {"prog.py"}
        anyio.run(go)
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)
