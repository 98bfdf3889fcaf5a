"""Ferry's GitHub side: configuration, a typed REST client, and the webhook's checks and commands."""
