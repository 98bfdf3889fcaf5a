"""Ferry's agent: the LangGraph migration loop, fix policies, LLM client, service and CLI."""
