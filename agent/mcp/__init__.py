"""``ferry mcp``: Ferry's tools and migrations for coding agents, over the Model Context Protocol.

A front door like the CLI and the service: the tools' own pydantic models are the MCP tools' schemas
(:mod:`agent.mcp.tools`), migrations are the service's sessions (:mod:`agent.service.operations`) with
their owners, and the verdict is always Ferry's. Transports: stdio (a local agent) and streamable HTTP
(behind the service's bearer tokens, mounted in ``ferry serve`` or standalone).
"""
