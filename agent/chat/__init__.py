"""A migration session's chat: what a message means (without a model), the rules and lines it names,
and the model's replies when one is configured."""
