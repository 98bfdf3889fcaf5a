"""Graph nodes: small functions from the state to a partial update."""
