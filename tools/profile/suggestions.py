"""Suggestion texts per finding kind, as data. ``{n}``, ``{where}``, ``{op}`` are filled in."""

from __future__ import annotations

SYNC_SUGGESTIONS = {
    "item": "`.item()` waits for the device each time ({n}x at {where}). Keep the value on the device "
            "(e.g. `running = running + loss.detach()`) and call `.item()` once after the loop or every N steps.",
    "tolist": "`.tolist()` copies to the host and waits ({n}x at {where}). Keep the tensor on the device, or "
              "convert once after the loop.",
    "cpu": "`.cpu()` / `.to('cpu')` copies to the host and waits ({n}x at {where}). Move results back once, "
           "after the loop, or keep the computation on the device.",
    "numpy": "`.numpy()` needs a host copy ({n}x at {where}). Convert once after the loop.",
    "bool": "Python control flow on a device tensor (`if t:` / `while t:`) syncs ({n}x at {where}). Use "
            "`torch.where`, or decide from host-side values.",
    "float": "`float(t)` on a device tensor syncs ({n}x at {where}). Keep it a tensor until the end of the step.",
    "int": "`int(t)` / indexing with a device scalar syncs ({n}x at {where}). Keep indices on the host or use "
           "tensor indexing.",
    "print": "Printing a device tensor copies it to the host ({n}x at {where}). Log `.item()` values every N "
             "steps instead of every step.",
}
DATA_DEPENDENT_SUGGESTIONS = {
    "nonzero": "use a boolean mask with `torch.where(mask, x, 0)`, or `torch.nonzero_static(x, size=K)` when "
               "an upper bound is known",
    "argwhere": "use a boolean mask with `torch.where`, or `torch.nonzero_static` with a known size",
    "masked_select": "use `torch.where(mask, x, 0)` (or `x * mask`) and reduce, keeping the shape static",
    "unique": "compute the unique values once on the CPU before the loop, or use a fixed vocabulary with "
              "`torch.bincount(x, minlength=K)`-style counting on CPU",
    "bincount": "use `torch.zeros(K, device=d).scatter_add_(0, idx, ones)` with a known K",
    "histc": "use `torch.bucketize` + `scatter_add_` with fixed bins",
    "repeat_interleave": "pass `output_size=` so the size is known, or use `expand` + `reshape`",
    "masked_scatter": "use `torch.where(mask, src_aligned, x)` with a pre-aligned source",
}
DEFAULT_FALLBACK = ("run it explicitly on the CPU outside the hot loop, or express it with ops tpx supports "
                    "natively (see `ferry scan` for the op)")
H2D_SUGGESTION = ("a host-to-device copy runs {n}x at {where} ({per_step:.1f} per profiled step). Create the "
                  "tensor on the device (`torch.zeros(..., device=device)`) or move it once before the loop.")
GRAPH_BREAK_HINTS = (
    ("item()", "read the value outside the compiled function, or set "
               "`torch._dynamo.config.capture_scalar_outputs = True`"),
    ("print", "move the `print` out of the compiled function (or log every N steps outside it)"),
    ("data-dependent", "avoid data-dependent shapes inside the compiled region (mask instead of index)"),
    ("builtin", "replace the unsupported Python builtin with a torch op, or move it out of the compiled region"),
    ("", "move this code out of the compiled function, or wrap it in `torch.compiler.disable`"),
)
RECOMPILE_SUGGESTION = ("the function recompiled: a guard failed ({reason}). Mark varying dims dynamic "
                        "(`torch._dynamo.mark_dynamic(x, 0)` or `torch.compile(dynamic=True)`) or pad inputs to "
                        "a few fixed shapes.")
