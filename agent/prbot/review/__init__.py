"""Review follow-up: a review comment on a Ferry pull request answered with a new commit on its branch."""
