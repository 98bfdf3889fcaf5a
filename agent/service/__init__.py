"""The thin HTTP service: start migrations, read status/results, answer approvals. It calls the graph."""
