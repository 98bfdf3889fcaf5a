"""Regression tests for eager failures once listed under "Open failures" in docs/conformance.md.

Every check compares the tpx result with the CPU result for the same inputs. The former
segfaults run in a subprocess so that a regression fails the test instead of killing pytest.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest
import torch

import backend  # noqa: F401  (registers tpx)

_FFT_SCRIPT = textwrap.dedent(
    """
    import torch, backend
    torch.manual_seed(0)
    x = torch.randn(5, 6, 7)
    F = torch.fft
    cases = {
        "ifft": lambda t: F.ifft(t, n=10, dim=1, norm="ortho"),
        "hfft": lambda t: F.hfft(t, n=10, dim=1, norm="ortho"),
        "hfft2": lambda t: F.hfft2(t, s=(3, 10), dim=(1, 2), norm="ortho"),
        "hfftn": lambda t: F.hfftn(t, s=(3, 10), dim=(1, 2), norm="ortho"),
        "ihfft": lambda t: F.ihfft(t, n=10, dim=1, norm="ortho"),
        "ihfft2": lambda t: F.ihfft2(t, s=(3, 10), dim=(1, 2), norm="ortho"),
        "ihfftn": lambda t: F.ihfftn(t, s=(3, 10), dim=(1, 2), norm="ortho"),
    }
    for name, f in cases.items():
        want = f(x)
        got = f(x.to("tpx")).cpu()
        assert got.shape == want.shape and got.dtype == want.dtype, name
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5, msg=name)
        print("ok", name, flush=True)
    """
)


def test_fft_with_padding_no_longer_crashes_and_matches_cpu():
    """ifft/hfft*/ihfft* used to recurse without bound (segfault) copying a lazily conjugated
    non-contiguous result: the Conjugate fallback resolved _copy_from's source with clone, whose
    copy_ reached tpx as _copy_from again."""
    proc = subprocess.run([sys.executable, "-c", _FFT_SCRIPT], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, f"rc={proc.returncode}\n{proc.stdout}\n{proc.stderr[-3000:]}"
    assert proc.stdout.count("ok ") == 7


def _pair(*shape, dtype=torch.complex64, seed=0):
    g = torch.Generator().manual_seed(seed)
    c = torch.randn(*shape, dtype=dtype, generator=g)
    return c, c.to("tpx")


def test_copy_of_conjugated_noncontiguous_view_matches_cpu():
    c, t = _pair(4, 5)
    for f in (lambda a: a.conj().t().clone(), lambda a: a.conj().t().resolve_conj(),
              lambda a: a.conj().imag.t().clone()):  # .imag of a conj view carries the neg bit
        got, want = f(t), f(c)
        assert got.device.type == "tpx"
        assert torch.equal(got.cpu(), want)
    dst = torch.empty(5, 4, dtype=torch.complex64, device="tpx")
    dst.copy_(t.conj().t())
    assert torch.equal(dst.cpu(), c.conj().t())
    assert torch.equal(t.conj().t().cpu(), c.conj().t())


def test_ops_that_read_conj_bits_themselves_match_cpu():
    """dot/vdot/mm fall through the Conjugate key: their tpx CPU alias must keep the bit."""
    c, t = _pair(4, 4)
    assert torch.equal(torch.vdot(t[0].conj(), t[1]).cpu(), torch.vdot(c[0].conj(), c[1]))
    assert torch.equal(torch.dot(t[0].conj(), t[1]).cpu(), torch.dot(c[0].conj(), c[1]))
    torch.testing.assert_close(torch.mm(t.conj(), t.t()).cpu(), torch.mm(c.conj(), c.t()), rtol=0, atol=0)


@pytest.mark.parametrize("other", [-3.14, 2, True, -0.0])
def test_copysign_with_python_number_matches_cpu(other):
    """copysign.Scalar calls copysign.Tensor with a wrapped-number tensor, which reaches the
    Python kernel as a plain number; it used to be passed on as such (a schema error)."""
    x = torch.tensor([1.5, -2.0, 0.0, -0.0, 3.0])
    got, want = torch.copysign(x.to("tpx"), other), torch.copysign(x, other)
    assert got.device.type == "tpx" and got.dtype == want.dtype
    assert torch.equal(got.cpu(), want)
    y = x.to("tpx")
    y.copysign_(other)
    assert torch.equal(y.cpu(), x.clone().copysign_(other))


def test_number_keeps_wrapped_number_type_promotion():
    # a wrapped number does not promote a 0-dim float16 tensor; a 0-dim float32 tensor would
    h = torch.tensor(1.5, dtype=torch.float16)
    assert torch.copysign(h.to("tpx"), -2.0).dtype == torch.copysign(h, -2.0).dtype == torch.float16
    i = torch.arange(-2, 3)
    got, want = torch.copysign(i.to("tpx"), -1.5), torch.copysign(i, -1.5)
    assert got.dtype == want.dtype and torch.equal(got.cpu(), want)
    got, want = torch.remainder(i.to("tpx"), 3), torch.remainder(i, 3)
    assert got.dtype == want.dtype == torch.int64 and torch.equal(got.cpu(), want)


@pytest.mark.parametrize("dim", [0, 1, None])
def test_take_along_dim_matches_cpu(dim):
    g = torch.Generator().manual_seed(1)
    m = torch.randn(5, 5, generator=g)
    idx = torch.randint(0, 5, (5, 5), generator=g) if dim is not None else torch.randint(0, 25, (7,), generator=g)
    got = torch.take_along_dim(m.to("tpx"), idx.to("tpx"), dim)
    assert torch.equal(got.cpu(), torch.take_along_dim(m, idx, dim))


@pytest.fixture
def fp32_matmuls(tpx_config):
    prev = torch.get_float32_matmul_precision()
    torch.set_float32_matmul_precision("highest")
    tpx_config(matmul_precision="highest")
    yield
    torch.set_float32_matmul_precision(prev)


@pytest.mark.parametrize("case", ["causal", "bool_mask", "float_mask", "plain"])
def test_sdpa_selects_the_cpu_kernel_and_agrees_bitwise(case, fp32_matmuls):
    """tpx asks the CPU which SDPA kernel to use (flash-for-CPU here), so forward and backward
    equal the CPU's bit for bit (the math kernel used to differ by ~1e-5)."""
    g = torch.Generator().manual_seed(2)
    q, k, v = (torch.randn(4, 4, n, 8, generator=g) for n in (3, 6, 6))
    kw = {}
    if case == "causal":
        kw["is_causal"] = True
    elif case == "bool_mask":
        kw["attn_mask"] = torch.rand(4, 4, 3, 6, generator=g) > 0.3
    elif case == "float_mask":
        kw["attn_mask"] = torch.randn(3, 6, generator=g)
    choice = torch._fused_sdp_choice(q, k, v, **kw)
    on_tpx = {n: (t.to("tpx") if isinstance(t, torch.Tensor) else t) for n, t in kw.items()}
    assert torch._fused_sdp_choice(q.to("tpx"), k.to("tpx"), v.to("tpx"), **on_tpx) == choice
    cpu_in = [t.clone().requires_grad_() for t in (q, k, v)]
    tpx_in = [t.to("tpx").requires_grad_() for t in (q, k, v)]
    tkw = {n: (t.to("tpx") if isinstance(t, torch.Tensor) else t) for n, t in kw.items()}
    want = torch.nn.functional.scaled_dot_product_attention(*cpu_in, **kw)
    got = torch.nn.functional.scaled_dot_product_attention(*tpx_in, **tkw)
    assert torch.equal(got.cpu(), want.detach())
    gout = torch.randn(want.shape, generator=g)
    want.backward(gout)
    got.backward(gout.to("tpx"))
    for c, t in zip(cpu_in, tpx_in, strict=True):
        assert torch.equal(t.grad.cpu(), c.grad)


def test_sdpa_follows_the_bf16_matmul_rule(tpx_config):
    """With bf16 matmuls (the chip's default) the flash kernel's q/k/v are rounded like every
    matmul operand: tpx equals the CPU kernel on bf16-rounded float32 inputs."""
    tpx_config(matmul_precision="bf16")
    g = torch.Generator().manual_seed(3)
    q, k, v = (torch.randn(2, 2, 5, 8, generator=g) for _ in range(3))
    got = torch.nn.functional.scaled_dot_product_attention(q.to("tpx"), k.to("tpx"), v.to("tpx"), is_causal=True)
    r = [t.to(torch.bfloat16).float() for t in (q, k, v)]
    assert torch.equal(got.cpu(), torch.nn.functional.scaled_dot_product_attention(*r, is_causal=True))
