"""Whether a target run's op counts show the program's work on tpx (what ``migrated`` needs, and what
``ferry eval`` grades a real case by)."""

from __future__ import annotations

from tools.profile.models import DeviceWork

# The share of a target run's work that must run on tpx before it counts as device work. The work
# is the model's compute when the run has any (tools/profile/device_ops.py COMPUTE_OPS: matrix
# products, convolutions, attention, RNN cells, embedding lookups, log-softmax/NLL; a model on the
# device runs nearly all of them there, whatever the host does besides: data generation,
# augmentation, checkpoint I/O, metrics); otherwise every aten op from the first tpx op on. A
# program whose model stayed on CPU runs almost nothing on tpx (its share is near 0).
DEVICE_SHARE_MIN = 0.5
COMPUTE = "matmul, convolution, attention, RNN, embedding, loss"
DEVICE_WAYS = "a --cuda flag off by default, --device cpu, use_cuda=False"
DEVICE_HINT = f"check how the program selects its device ({DEVICE_WAYS})"


def work_problem(work: DeviceWork | None, error: str | None = None, hint: str = DEVICE_HINT) -> str | None:
    """Why ``work`` (a target run's op counts) does not show the program's work on tpx, None when it
    does (also what ``ferry eval`` grades a real case by). ``hint``: what to check when the work
    stayed on CPU."""
    if work is None:
        why = error or "the target run recorded no op counts"
        return f"there is no evidence that the target run executed its work on tpx ({why})"
    if work.tpx_share is None:
        return (f"the target run's ops were not counted (tpx itself counted {work.run_tpx_ops}), so "
                "device work cannot be shown")
    if work.tpx_ops == 0:
        return (f"the target run executed 0 of {work.total_ops} ops on tpx: the work stayed on CPU; {hint}")
    if work.compute_share is not None:
        if work.compute_share < DEVICE_SHARE_MIN:
            return (f"the target run executed {work.compute_tpx_ops} of its {work.compute_ops} compute ops ({COMPUTE}) "
                    f"on tpx ({work.compute_share:.0%}, below {DEVICE_SHARE_MIN:.0%}): the model's work stayed on "
                    f"CPU; {hint}")
        return None
    if work.tpx_share < DEVICE_SHARE_MIN:
        return (f"the target run executed {work.tpx_ops} of {work.total_ops} ops on tpx ({work.tpx_share:.0%}, "
                f"below {DEVICE_SHARE_MIN:.0%}) and no compute op ({COMPUTE}): the work stayed on CPU; {hint}")
    return None
