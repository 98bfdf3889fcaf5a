# The fixture suite's repos and grading tests are run by the harness under test, never collected here.
collect_ignore_glob = ["*/repo/*", "*/grading/*"]
