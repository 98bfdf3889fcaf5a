"""``ferry bot sweep ORG``: an organisation's repositories listed, scanned, and a migration pull request
opened for each with CUDA findings, under GitHub's rate limits and a per-run cap, never twice."""
