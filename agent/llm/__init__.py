"""LLM fixing through any OpenAI-compatible server (OpenAI, vLLM, Ollama, ...)."""
