"""Parity: the target run's recorded tensors against the reference's, judged by dtype tiers, the error
ratio and drift budgets."""
