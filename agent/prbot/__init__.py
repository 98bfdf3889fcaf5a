"""The pull-request bot: ``ferry pr``'s git work and PR text, the GitHub client and webhook, and the jobs
the service runs for a repository's ``/ferry migrate`` comments and labels."""
