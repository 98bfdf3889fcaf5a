"""A migration: its graph, nodes, edges, typed state and records, and the one door to it (``facade``).

Callers outside this package (the CLI, the service, the PR bot, the chat, the eval harness) start,
resume, load and cancel migrations through :mod:`agent.migration.facade` only; this file imports
nothing, so that a node importing ``agent.migration.state`` does not pull the whole graph in.
"""
