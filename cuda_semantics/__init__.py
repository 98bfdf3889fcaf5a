"""CUDA's behaviours reproduced with PyTorch's ops, for any device (torch and the standard library only).

Both tpx (``backend/``) and the CPU reference run's CUDA redirect (``tools/redirect/``) must do what
CUDA does where the program relies on CUDA's semantics: replaying a captured CUDA graph
(:mod:`.graphs`) and CUDA's autocast cast policy (:mod:`.autocast`). They share this package, which sits
below both: importing it never registers tpx nor loads its extension, so a CPU reference run can use it.
In a user's process it is loaded under Ferry's private root like the rest of Ferry's child-side code.
"""
