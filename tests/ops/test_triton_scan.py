"""The fused Triton scan (rnnlens.ops.triton_scan) against the plain loop: states and the
gradients of f, u and c0, for every semiring, with masks, shared biases and ties.

On a CUDA machine the compiled kernels run on the GPU. Elsewhere they run in Triton's
interpreter on CPU tensors (numpy, one program and one step at a time), so the sizes here
are tiny. The interpreter is chosen when the kernels are built, once per process, by the
environment variable TRITON_INTERPRET; the module fixture sets it for this module only.
"""
import math

import pytest
import torch
from tests.support import max_diff, triton_kernels_here

from rnnlens.errors import RnnlensError
from rnnlens.ops import triton_scan
from rnnlens.ops.elementwise import elementwise_scan, elementwise_scan_ref
from rnnlens.ops.semiring import SEMIRINGS
from rnnlens.ops.triton_scan import elementwise_scan_triton

pytest.importorskip("triton", minversion="3.0", reason="triton 3 is not installed (pip install triton)")

NAMES = list(SEMIRINGS)
F64 = torch.float64
DEVICE = "cuda" if torch.cuda.is_available() else "cpu"
TOL = {F64: (1e-12, 1e-10), torch.float32: (1e-5, 1e-4)}     # (states, gradients)


@pytest.fixture(scope="module", autouse=True)
def kernels():
    """Without a GPU: the kernels in Triton's interpreter, for this module."""
    yield from triton_kernels_here(triton_scan._kernels)


def gates(z, name):
    """Forget gates sigma(z) as the semiring writes them: sigma (real), log sigma (max-plus,
    log; eq. 21a), -log sigma (min-plus)."""
    if name == "real":
        return torch.sigmoid(z)
    lf = torch.nn.functional.logsigmoid(z)
    return -lf if name == "min-plus" else lf


def leaves(*tensors):
    """Fresh leaf copies on DEVICE with requires_grad (None stays None)."""
    return [None if t is None else t.detach().to(DEVICE).requires_grad_() for t in tensors]


def run(scan, name, z, u, c0, mask, w, gate=True):
    """States c (on the CPU) and the gradients of (c * w).sum() w.r.t. z (through the gates,
    or f itself with gate=False), u and c0 (those given)."""
    z, u, c0 = leaves(z, u, c0)
    mask = None if mask is None else mask.to(z.device)
    c, final = scan(gates(z, name) if gate else z, u, c0, mask, semiring=name)
    assert torch.equal(final, c[:, -1])
    grads = torch.autograd.grad((c * w.to(c.device, c.dtype)).sum(), [t for t in (z, u, c0) if t is not None])
    return c.cpu(), [g.cpu() for g in grads]


def inf_diff(a, b):
    """max_diff where equal infinities count as 0 (the zero state carried at leading pads)."""
    same = a == b
    return max_diff(a.masked_fill(same, 0), b.masked_fill(same, 0))


def compare(name, z, u, c0, mask=None, gate=True, against=elementwise_scan_ref):
    """Largest differences (states, gradients) between the Triton scan and `against`, which
    runs on the CPU."""
    w = torch.randn(torch.broadcast_shapes(z.shape, u.shape), dtype=z.dtype)
    c, g = run(elementwise_scan_triton, name, z, u, c0, mask, w, gate)
    z, u, c0 = (None if t is None else t.detach().requires_grad_() for t in (z, u, c0))
    f = gates(z, name) if gate else z
    c_ref, _ = against(f, u, c0, mask, semiring=name)
    g_ref = torch.autograd.grad((c_ref * w).sum(), [t for t in (z, u, c0) if t is not None])
    print(f"{name}: states, then gradients (z, u, c0):")
    return inf_diff(c, c_ref), max(max_diff(a, b) for a, b in zip(g, g_ref))


def lengths_mask(lengths, T, left=False):
    pos = torch.arange(T)[None]
    n = torch.tensor(lengths)[:, None]
    return pos >= T - n if left else pos < n


# ---- against the loop ----------------------------------------------------------------------

CASES = {   # name -> (B, T, D, mask or None, start state given)
    "T=1": (2, 1, 3, None, True),
    "odd T": (3, 7, 5, None, True),
    "default start": (2, 6, 3, None, False),
    "interior pads": (3, 9, 5, "random", True),
    "right pads": (3, 6, 4, lengths_mask([6, 2, 1], 6), True),
    "left pads, default start": (3, 6, 4, lengths_mask([6, 3, 1], 6, left=True), False),
}


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("dtype", [F64, torch.float32], ids=["float64", "float32"])
@pytest.mark.parametrize("case", list(CASES))
def test_equals_reference(name, dtype, case):
    B, T, D, mask, given = CASES[case]
    if isinstance(mask, str):
        mask = torch.rand(B, T) > 0.3
    z, u = torch.randn(B, T, D, dtype=dtype), torch.randn(B, T, D, dtype=dtype)
    c0 = torch.randn(B, D, dtype=dtype) if given else None
    dc, dg = compare(name, z, u, c0, mask)
    tol_c, tol_g = TOL[dtype]
    assert dc < tol_c and dg < tol_g


@pytest.mark.parametrize("name", NAMES)
def test_pads_keep_the_state_and_get_no_gradient(name):
    mask = lengths_mask([5, 2], 5)
    z, u, c0 = leaves(torch.randn(2, 5, 3, dtype=F64), torch.randn(2, 5, 3, dtype=F64), torch.randn(2, 3, dtype=F64))
    f = gates(z, name)
    c, _ = elementwise_scan_triton(f, u, c0, mask.to(DEVICE), semiring=name)
    c.sum().backward()
    assert torch.equal(c[1, 2:], c[1, 1].expand(3, 3))
    assert not u.grad[1, 2:].any() and not z.grad[1, 2:].any()


@pytest.mark.parametrize("name", NAMES)
def test_shared_biases_broadcast(name):
    """A gate or an input shared over batch and time ([D]) and a shared start state [D]:
    read through stride-0 views, their gradients summed over batch and time."""
    B, T, D = 3, 5, 4
    mask = torch.rand(B, T) > 0.2
    dc, dg = compare(name, torch.randn(B, T, D, dtype=F64), torch.randn(D, dtype=F64), torch.randn(D, dtype=F64), mask)
    assert dc < 1e-12 and dg < 1e-10
    dc, dg = compare(name, torch.randn(D, dtype=F64), torch.randn(B, T, D, dtype=F64), None, mask)
    assert dc < 1e-12 and dg < 1e-10


@pytest.mark.parametrize("name", ["real", "log"])
def test_strided_views_are_read_in_place(name):
    """f and u as the two halves of one projection, time-major storage seen batch-first."""
    B, T, D = 3, 5, 4
    proj = torch.randn(T, B, 2 * D, dtype=F64).transpose(0, 1)           # [B,T,2D], not contiguous
    z, u = proj[..., :D], proj[..., D:]
    c0 = torch.randn(D, 2, dtype=F64)[:, 0]                              # a strided [D]
    dc, dg = compare(name, z, u, c0, torch.rand(B, T) > 0.3, gate=False)
    assert dc < 1e-12 and dg < 1e-10


@pytest.mark.parametrize("name", NAMES)
def test_only_some_inputs_need_gradients(name):
    z, u = torch.randn(2, 4, 3, dtype=F64), torch.randn(2, 4, 3, dtype=F64)
    (uu,) = leaves(u)
    elementwise_scan_triton(gates(z, name).to(DEVICE), uu, semiring=name)[0].sum().backward()
    (u_ref,) = leaves(u)
    elementwise_scan_ref(gates(z, name), u_ref.cpu(), semiring=name)[0].sum().backward()
    assert max_diff(uu.grad.cpu(), u_ref.grad.cpu()) < 1e-12


def test_gradcheck():
    """Finite differences (max-plus and min-plus are piecewise linear: see the tie tests)."""
    mask = torch.tensor([[True, False, True, True], [False, True, True, False]])
    for name in ("real", "log"):
        z, u, c0 = leaves(torch.randn(2, 4, 2, dtype=F64), torch.randn(2, 4, 2, dtype=F64), torch.randn(2, 2, dtype=F64))

        def fn(z, u, c0, name=name):
            return elementwise_scan_triton(gates(z, name), u, c0, mask.to(DEVICE), semiring=name)[0]

        assert torch.autograd.gradcheck(fn, (z, u, c0))


# ---- ties and infinities: the rules of the chunked scan's backward ---------------------------

def test_max_plus_tie_goes_to_the_carried_branch():
    # c1 = max(0 + 1, 1): a tie; the whole gradient goes to f1 and c0, none to u1
    f, u, c0 = leaves(torch.tensor([[[0.0], [-1.0]]], dtype=F64), torch.tensor([[[1.0], [-5.0]]], dtype=F64),
                      torch.tensor([[1.0]], dtype=F64))
    c, _ = elementwise_scan_triton(f, u, c0, semiring="max-plus")
    c[0, 0, 0].backward()
    assert c.flatten().tolist() == [1.0, 0.0]
    assert (f.grad.flatten().tolist(), u.grad.flatten().tolist(), c0.grad.item()) == ([1.0, 0.0], [0.0, 0.0], 1.0)


@pytest.mark.parametrize("name", ["max-plus", "min-plus"])
def test_many_ties_match_the_chunked_scan(name):
    """Small integers make ties everywhere (sums of integers are exact in any order)."""
    g = torch.Generator().manual_seed(1)
    f = -torch.randint(0, 2, (3, 8, 4), generator=g).to(F64) * (1 if name == "max-plus" else -1)
    u = torch.randint(-2, 3, (3, 8, 4), generator=g).to(F64)
    c0 = torch.randint(-2, 3, (3, 4), generator=g).to(F64)
    mask = torch.rand(3, 8, generator=g) > 0.2
    dc, dg = compare(name, f, u, c0, mask, gate=False, against=elementwise_scan)
    assert dc == 0 and dg < 1e-12


def test_log_minus_infinity_states():
    """-inf start states and -inf inputs (states no path reaches yet): the states equal the
    loop's, and the gradients equal the chunked scan's (a step whose two branches are both
    -inf passes the gradient on with weight 1), with no nan."""
    B, T, D = 2, 6, 3
    f = torch.nn.functional.logsigmoid(torch.randn(B, T, D, dtype=F64))
    u = torch.randn(B, T, D, dtype=F64)
    u[0, :3] = -math.inf                                    # nothing reaches row 0 before t = 4
    u[1, :, 0] = -math.inf                                  # nor row 1's first coordinate, ever
    c0 = torch.randn(B, D, dtype=F64)
    c0[0] = -math.inf
    c0[1, 0] = -math.inf
    mask = torch.tensor([[False, True, True, True, True, False], [True] * T])
    for start in (c0, None):
        c, g = run(elementwise_scan_triton, "log", f, u, start, mask, torch.ones(B, T, D, dtype=F64), gate=False)
        assert torch.isneginf(c[0, :3]).all() and torch.isneginf(c[1, :, 0]).all()
        assert all(torch.isfinite(t).all() for t in g)
        assert inf_diff(c, elementwise_scan_ref(f, u, start, mask, semiring="log")[0]) < 1e-12
        dc, dg = compare("log", f, u, start, mask, gate=False, against=elementwise_scan)
        assert dc < 1e-12 and dg < 1e-12


# ---- dtypes, shapes, arguments -------------------------------------------------------------

@pytest.mark.parametrize("name", NAMES)
def test_bfloat16_inputs_keep_a_float32_state(name):
    """bfloat16 in and out, the state carried in float32: states and gradients are the
    float32 loop's on the same inputs, rounded once to bfloat16 (a relative 2**-8 to
    nearest; 2**-7, as Triton's interpreter rounds the gradients towards zero)."""
    B, T, D = 2, 9, 5
    f = gates(torch.randn(B, T, D), name).bfloat16()
    u, c0 = torch.randn(B, T, D).bfloat16(), torch.randn(B, D).bfloat16()
    mask = torch.rand(B, T) > 0.3
    w = torch.randn(B, T, D).bfloat16()
    c, g = run(elementwise_scan_triton, name, f, u, c0, mask, w, gate=False)
    assert c.dtype == torch.bfloat16 and all(t.dtype == torch.bfloat16 for t in g)
    c32, g32 = run(elementwise_scan_ref, name, f.float(), u.float(), c0.float(), mask, w.float(), gate=False)
    for a, b in zip([c] + g, [c32] + g32):
        print(f"relative: {((a.float() - b).abs() / (b.abs() + 1e-4)).max().item():.2e}")
        assert ((a.float() - b).abs() <= 2 ** -7 * b.abs() + 1e-4).all()


def test_empty_shapes():
    x = torch.rand(2, 0, 3, device=DEVICE)
    assert elementwise_scan_triton(x, x)[0].shape == (2, 0, 3)
    for shape in ((0, 4, 3), (2, 4, 0)):
        x = torch.rand(shape, device=DEVICE, requires_grad=True)
        c, _ = elementwise_scan_triton(x, x, semiring="log")
        c.sum().backward()
        assert c.shape == shape and x.grad.shape == shape


def test_arguments(monkeypatch):
    f = torch.rand(2, 5, 3, device=DEVICE)
    with pytest.raises(RnnlensError, match="real, max-plus"):
        elementwise_scan_triton(f, f, semiring="tropical")
    with pytest.raises(RnnlensError, match="mask"):
        elementwise_scan_triton(f, f, mask=torch.ones(2, 4, dtype=torch.bool, device=DEVICE))
    with pytest.raises(RnnlensError, match=r"\[B,T,D\]"):
        elementwise_scan_triton(f[0], f[0])
    with pytest.raises(RnnlensError, match="floating point"):
        elementwise_scan_triton(f.long(), f)
    if DEVICE == "cpu":
        monkeypatch.setenv("TRITON_INTERPRET", "0")
        with pytest.raises(RnnlensError, match="CUDA"):
            elementwise_scan_triton(f, f)
    monkeypatch.setenv("RNNLENS_TRITON", "0")
    assert not triton_scan.triton_enabled()
    monkeypatch.setenv("RNNLENS_TRITON", "1")
    assert triton_scan.triton_enabled() and triton_scan.triton_available()


def spy(monkeypatch):
    """Count the calls elementwise_scan makes to the Triton scan."""
    calls = []
    fused = triton_scan.elementwise_scan_triton

    def counted(*args, **kwargs):
        calls.append(args[0].device)
        return fused(*args, **kwargs)

    monkeypatch.setattr(triton_scan, "elementwise_scan_triton", counted)
    return calls


def test_elementwise_scan_keeps_cpu_tensors(monkeypatch):
    calls = spy(monkeypatch)
    f = torch.rand(2, 5, 3)
    elementwise_scan(f, f, None, torch.rand(2, 5) > 0.3, semiring="log")
    assert calls == []


@pytest.mark.skipif(DEVICE != "cuda", reason="no CUDA device: elementwise_scan keeps CPU tensors")
@pytest.mark.parametrize("name", NAMES)
def test_elementwise_scan_dispatches_cuda_tensors(name, monkeypatch):
    calls = spy(monkeypatch)
    z, u = torch.randn(3, 50, 7, device="cuda"), torch.randn(3, 50, 7, device="cuda")
    mask = torch.rand(3, 50, device="cuda") > 0.3
    f = gates(z, name)
    fused, _ = elementwise_scan(f, u, None, mask, semiring=name)
    assert len(calls) == 1
    assert inf_diff(fused, elementwise_scan_triton(f, u, None, mask, semiring=name)[0]) < 1e-6   # pads in-kernel
    monkeypatch.setenv("RNNLENS_TRITON", "0")
    chunked, _ = elementwise_scan(f, u, None, mask, semiring=name)
    assert len(calls) == 1 and inf_diff(fused, chunked) < 1e-4
    z, u = torch.randn(2, 4096, 8, device="cuda"), torch.randn(2, 4096, 8, device="cuda")
    c, g = run(elementwise_scan_triton, name, z, u, None, None, torch.randn(2, 4096, 8))
    assert torch.isfinite(c).all() and all(torch.isfinite(t).all() for t in g)
