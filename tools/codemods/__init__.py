"""libcst codemods for CUDA idioms: one rule per module in ``tools.codemods.rules``.

Rule ids are ``FRY0NN`` where NN is the entry number in the CUDA idiom catalogue
(``docs/idioms.md``); see ``docs/codemods.md``. ``tools.codemods.fixes`` holds the edits
at one site (``FIX0NN``) that the offline fix policy makes.
"""
