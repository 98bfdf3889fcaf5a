"""Code that runs inside the sandboxed child (kept importable without pydantic or torch)."""
