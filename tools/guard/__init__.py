"""The test guard: edits never make the checks easier instead of the code right (docs/guard.md).

``tools.guard.static`` reads a patch (each file's text before and after, libcst) for the kinds of change
that weaken a test suite: a test removed, a skip or xfail added, fewer assertions in a test, a tolerance
loosened past the numerics policy, an exception swallowed around an assertion, the collection changed
(conftest.py, the pytest sections of the configuration files). ``tools.guard.outcomes`` compares the
tests a run collected and passed with the reference's. Every finding names its rule (``GRD00N``) and site.
"""
