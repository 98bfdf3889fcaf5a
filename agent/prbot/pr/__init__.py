"""`ferry pr`: a clean git work tree migrated into a branch of reviewable commits, and the pull request's text."""
