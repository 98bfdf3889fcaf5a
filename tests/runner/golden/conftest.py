# cases/ holds the programs the golden traces were produced from (some are failing pytest
# files on purpose): they are inputs of make_goldens.py, not tests of this suite.
collect_ignore_glob = ["cases/*"]
