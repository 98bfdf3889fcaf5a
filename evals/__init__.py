"""Sample repositories and the offline eval harness."""
