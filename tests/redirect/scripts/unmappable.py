# CUDA-only features the redirect cannot map: each must fail naming its call site.
import torch


def try_it(label, fn):
    try:
        fn()
        print(label, "NO-ERROR")
    except Exception as exc:  # noqa: BLE001
        print(label, "|", type(exc).__name__, "|", exc)


try_it("graphed", lambda: torch.cuda.make_graphed_callables(torch.nn.Linear(2, 2), (torch.randn(1, 2),)))


def ext():
    from torch.utils.cpp_extension import CUDAExtension
    CUDAExtension("k", ["kernel.cu"])


try_it("ext", ext)


def load_cu():
    from torch.utils.cpp_extension import load
    load(name="k", sources=["kernel.cu"])


try_it("load", load_cu)


def triton():
    import triton  # noqa: F401


try_it("triton", triton)
graphed = torch.cuda.make_graphed_callables(torch.nn.Linear(2, 2), (torch.randn(1, 2),))
