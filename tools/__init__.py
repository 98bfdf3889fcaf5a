"""Ferry's deterministic tools: typed functions (pydantic in, pydantic out)."""
