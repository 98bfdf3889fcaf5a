"""Runs untrusted code in isolation. Imports the standard library only."""
