"""The MCP server: Ferry's tools (:mod:`agent.mcp.tools`), resources and prompts on the SDK's low-level server.

Each tool's input schema is its argument model's JSON schema and its output schema its result model's. A
call runs in a worker thread with the caller's cancel event: the client's cancellation, the server's
per-call timeout and the end of the connection all set it, and the runs in flight stop. Tool errors come
back as results marked ``isError`` with a message that says what to do.
"""

from __future__ import annotations

import json
import logging
import threading
from typing import Any

import anyio
import anyio.from_thread
import anyio.to_thread
import mcp_types as types
from mcp.server import Server as McpServer
from mcp.server import ServerRequestContext
from pydantic import ValidationError

from agent.mcp import prompts
from agent.mcp.context import Call, Server
from agent.mcp.resources import TEMPLATES, ResourceMissing, migration_resources, read
from agent.mcp.tools import TOOLS, ToolRefused, keep
from agent.service.deps import BadToken, owner_for
from agent.service.settings import LOCAL_OWNER

logger = logging.getLogger(__name__)

INSTRUCTIONS = (
    "Ferry migrates PyTorch code from CUDA to PrivateUse1 accelerators (its own: tpx). Work in this order: "
    "scan -> plan -> rewrite -> run -> check -> profile, or call migrate for Ferry's whole loop. Ferry's "
    "verdict is the one that counts: a migration is done only when `status` says verdict.migrated=true "
    "(the work ran on the device, the tests passed and parity passed, on the tree as it is now). Editing "
    "the repository after a migration makes its verdict stale: call migrate again.")


class _Runs:
    """Run/check/profile calls in flight per client (owner), capped."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._count: dict[str, int] = {}

    def enter(self, owner: str, cap: int) -> bool:
        with self._lock:
            if self._count.get(owner, 0) >= cap:
                return False
            self._count[owner] = self._count.get(owner, 0) + 1
            return True

    def leave(self, owner: str) -> None:
        with self._lock:
            self._count[owner] = max(0, self._count.get(owner, 0) - 1)


def tool_list() -> list[types.Tool]:
    """The tools as MCP lists them: the schemas are the models' own."""
    return [types.Tool(name=spec.name, description=spec.description,
                       input_schema=spec.args.model_json_schema(),
                       output_schema=spec.result.model_json_schema(),
                       annotations=types.ToolAnnotations(read_only_hint=spec.read_only and not spec.runs_code,
                                                         destructive_hint=False, open_world_hint=False))
            for spec in TOOLS.values()]


def _owner(server: Server, ctx: ServerRequestContext[Any, Any]) -> str:
    """Who calls: over HTTP the owner of the request's bearer token (checked again here, whatever the
    middleware did), over stdio the local user."""
    if server.transport == "stdio":
        return LOCAL_OWNER
    request = ctx.request
    headers = getattr(request, "headers", None)
    if headers is None:
        raise BadToken("no HTTP request behind this call")
    return owner_for(server.settings, headers.get("authorization"))


def _text(call: Call, name: str, result: Any) -> str:
    """The result as text for the model, cut to the server's limit with the URI of the whole (kept)."""
    text = json.dumps(result.model_dump(mode="json"), indent=1)
    limit = call.server.limits.max_text_chars
    if len(text) <= limit:
        return text
    uri = keep(call, name, result)
    return text[:limit] + f"\n... [{len(text) - limit} more characters cut: read the resource {uri} for all of it]"


def _error(message: str) -> types.CallToolResult:
    return types.CallToolResult(content=[types.TextContent(text=message)], is_error=True)


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("ferry")
    except PackageNotFoundError:
        return "0"


def build(server: Server) -> McpServer[Any]:
    """The MCP server over ``server`` (the store, the workers and the limits)."""
    runs = _Runs()

    async def list_tools(ctx: ServerRequestContext[Any, Any],
                         params: types.PaginatedRequestParams | None) -> types.ListToolsResult:
        return types.ListToolsResult(tools=tool_list())

    async def call_tool(ctx: ServerRequestContext[Any, Any],
                        params: types.CallToolRequestParams) -> types.CallToolResult:
        spec = TOOLS.get(params.name)
        if spec is None:
            return _error(f"no tool {params.name!r}; Ferry's tools: {', '.join(TOOLS)}")
        try:
            owner = _owner(server, ctx)
        except BadToken as exc:
            return _error(str(exc))
        try:
            args = spec.args.model_validate(params.arguments or {})
        except ValidationError as exc:
            problems = "; ".join(f"{'.'.join(str(p) for p in e['loc']) or 'arguments'}: {e['msg']}"
                                 for e in exc.errors(include_url=False))
            return _error(f"{spec.name}: bad arguments ({problems})")
        if spec.runs_code and not runs.enter(owner, server.limits.concurrent_runs):
            return _error(f"you have {server.limits.concurrent_runs} run/check/profile calls in flight already "
                          "(this server's limit per client); wait for one to end")
        def progress(fraction: float, message: str) -> None:
            # a no-op where the caller asked for no progress (the SDK knows its progress token)
            try:
                anyio.from_thread.run(ctx.session.report_progress, fraction, None, message)
            except Exception as exc:  # the call ended or the client went away: progress is best effort
                logger.debug("progress not sent: %s", exc)

        call = Call(server=server, owner=owner, progress=progress)

        def work() -> Any:
            try:
                result = spec.fn(call, args)
            finally:  # the slot is free when the work has ended, not when the client stopped waiting
                if spec.runs_code:
                    runs.leave(owner)
            return result, _text(call, spec.name, result)

        done = False
        try:
            with anyio.fail_after(server.limits.call_timeout_s):
                result, text = await anyio.to_thread.run_sync(work, abandon_on_cancel=True)
            done = True
        except TimeoutError:
            return _error(f"{spec.name} took longer than this server's {server.limits.call_timeout_s:.0f} s per "
                          "call and was stopped; for long work use migrate and follow it with status")
        except ToolRefused as exc:
            done = True
            return _error(str(exc))
        except Exception as exc:  # a fault of Ferry's: said, logged with its trace, never a dropped connection
            done = True
            logger.exception("MCP tool %s failed", spec.name)
            return _error(f"{spec.name} failed inside Ferry ({type(exc).__name__}: {exc}); the server's log has "
                          "the trace")
        finally:
            if not done:
                call.cancel.set()  # cancelled by the client, timed out, or the connection ended: runs stop
                logger.info("MCP tool %s stopped before it ended: its runs are cancelled", spec.name)
        return types.CallToolResult(content=[types.TextContent(text=text)],
                                    structured_content=result.model_dump(mode="json"))

    async def list_resources(ctx: ServerRequestContext[Any, Any],
                             params: types.PaginatedRequestParams | None) -> types.ListResourcesResult:
        try:
            owner = _owner(server, ctx)
        except BadToken:
            return types.ListResourcesResult(resources=[])
        rows, _ = server.store.sessions(owner, "finished", 50, 0)
        out: list[types.Resource] = []
        for row in rows:
            for uri in migration_resources(row.id):
                which = uri.rsplit("/", 1)[1]
                out.append(types.Resource(uri=uri, name=f"{row.id} {which}",
                                          description=f"migration {row.id} ({row.status}): its {which}"))
        return types.ListResourcesResult(resources=out)

    async def list_templates(ctx: ServerRequestContext[Any, Any],
                             params: types.PaginatedRequestParams | None) -> types.ListResourceTemplatesResult:
        return types.ListResourceTemplatesResult(resource_templates=[
            types.ResourceTemplate(uri_template=t, name=name, description=desc, mime_type=mime)
            for t, name, desc, mime in TEMPLATES])

    async def read_resource(ctx: ServerRequestContext[Any, Any],
                            params: types.ReadResourceRequestParams) -> types.ReadResourceResult:
        from mcp.shared.exceptions import MCPError

        uri = str(params.uri)
        try:
            owner = _owner(server, ctx)
            text, mime = await anyio.to_thread.run_sync(read, uri, owner, server.store, server.settings.data_dir,
                                                        server.calls_dir(owner))
        except (ResourceMissing, BadToken) as exc:
            raise MCPError(types.INVALID_PARAMS, str(exc)) from None
        return types.ReadResourceResult(contents=[types.TextResourceContents(uri=uri, mime_type=mime, text=text)])

    async def list_prompts(ctx: ServerRequestContext[Any, Any],
                           params: types.PaginatedRequestParams | None) -> types.ListPromptsResult:
        return types.ListPromptsResult(prompts=prompts.listed())

    async def get_prompt(ctx: ServerRequestContext[Any, Any],
                         params: types.GetPromptRequestParams) -> types.GetPromptResult:
        from mcp.shared.exceptions import MCPError

        try:
            return prompts.render(params.name, dict(params.arguments or {}))
        except KeyError as exc:
            raise MCPError(types.INVALID_PARAMS, str(exc.args[0])) from None

    return McpServer("ferry", version=_version(), title="Ferry", instructions=INSTRUCTIONS,
                     on_list_tools=list_tools, on_call_tool=call_tool, on_list_resources=list_resources,
                     on_list_resource_templates=list_templates, on_read_resource=read_resource,
                     on_list_prompts=list_prompts, on_get_prompt=get_prompt)
