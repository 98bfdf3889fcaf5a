"""One rule per module; each exports ``RULE``. Module names start with the rule id."""
