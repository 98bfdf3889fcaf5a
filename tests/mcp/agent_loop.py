"""A small coding agent for the tests: an OpenAI-compatible model (the scripted server on loopback) whose
tool calls go to Ferry's MCP server through the SDK's client, plus two tools of the agent's own that edit
files the way a coding agent does (write_file, delete_file), outside Ferry. It stands in for Claude Code and
the like: Ferry sees only the MCP calls and the files on disk."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import openai
from mcp import Client

OWN_TOOLS = [
    {"type": "function", "function": {"name": "write_file", "description": "write a file of the repository",
                                      "parameters": {"type": "object", "properties": {
                                          "path": {"type": "string"}, "text": {"type": "string"}},
                                          "required": ["path", "text"]}}},
    {"type": "function", "function": {"name": "delete_file", "description": "delete a file of the repository",
                                      "parameters": {"type": "object", "properties": {"path": {"type": "string"}},
                                                     "required": ["path"]}}},
]


def _own(name: str, args: dict[str, Any], root: Path) -> str:
    target = (root / args["path"]).resolve()
    assert target.is_relative_to(root.resolve()), args
    if name == "write_file":
        target.write_text(args["text"])
        return f"wrote {args['path']}"
    target.unlink()
    return f"deleted {args['path']}"


async def session(model_url: str, mcp: Client, task: str, root: Path, max_turns: int = 12) -> list[dict[str, Any]]:
    """Run the agent until the model stops calling tools; returns each MCP call's name, arguments and result
    (``structured``: the tool's structured result, ``error``: its error text)."""
    model = openai.AsyncOpenAI(base_url=model_url, api_key="scripted-key", max_retries=0)
    listed = (await mcp.list_tools()).tools
    tools = [{"type": "function", "function": {"name": t.name, "description": t.description or "",
                                               "parameters": t.input_schema}} for t in listed] + OWN_TOOLS
    messages: list[dict[str, Any]] = [{"role": "user", "content": task}]
    calls: list[dict[str, Any]] = []
    for _ in range(max_turns):
        reply = await model.chat.completions.create(model="scripted", messages=messages,  # type: ignore[arg-type]
                                                    tools=tools)  # type: ignore[arg-type]
        msg = reply.choices[0].message
        messages.append(msg.model_dump(exclude_none=True))
        if not msg.tool_calls:
            break
        for tc in msg.tool_calls:
            args = json.loads(tc.function.arguments)
            if tc.function.name in ("write_file", "delete_file"):
                text = _own(tc.function.name, args, root)
            else:
                result = await mcp.call_tool(tc.function.name, args)
                text = result.content[0].text if result.content else ""
                calls.append({"name": tc.function.name, "args": args, "structured": result.structured_content,
                              "error": text if result.is_error else None})
            messages.append({"role": "tool", "tool_call_id": tc.id, "content": text})
    await model.close()
    return calls
