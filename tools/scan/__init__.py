"""Scan a repository for CUDA idioms and rewrite them (``tools.scan.api``)."""
