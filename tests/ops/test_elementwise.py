"""Semirings and the elementwise scan c_t = f_t (x) c_{t-1} (+) u_t: the chunked fast path
against the plain loop, in outputs and in the gradients of f, u and c0."""
import math

import pytest
import torch

from tests.support import max_diff
from rnnlens.errors import RnnlensError
from rnnlens.ops.elementwise import default_chunk, elementwise_scan, elementwise_scan_ref
from rnnlens.ops.semiring import LOG, MAX_PLUS, MIN_PLUS, REAL, SEMIRINGS, Semiring, get_semiring

NAMES = list(SEMIRINGS)
F64 = torch.float64


def gates(z: torch.Tensor, name: str) -> torch.Tensor:
    """Forget gates sigma(z) in (0,1), as the semiring writes them: the gate itself (real),
    its log (max-plus, log; eq. 21a) or its cost -log (min-plus)."""
    if name == "real":
        return torch.sigmoid(z)
    lf = torch.nn.functional.logsigmoid(z)
    return -lf if name == "min-plus" else lf


def inputs(name, B, T, D, dtype=F64, device="cpu", c0=True):
    """Leaf tensors (z, u, c0) with requires_grad; f = gates(z)."""
    z = torch.randn(B, T, D, dtype=dtype, device=device, requires_grad=True)
    u = torch.randn(B, T, D, dtype=dtype, device=device, requires_grad=True)
    s = torch.randn(B, D, dtype=dtype, device=device, requires_grad=True) if c0 else None
    return z, u, s


def outputs_and_grads(scan, name, z, u, c0, mask=None, weight=None, **kw):
    """c and the gradients of (c * weight).sum() w.r.t. z (through the gates), u and c0; the
    final state is each row's last (pads keep the state)."""
    c, final = scan(gates(z, name), u, c0, mask, semiring=name, **kw)
    assert torch.equal(final, c[:, -1])
    w = weight if weight is not None else torch.randn_like(c)
    leaves = [t for t in (z, u, c0) if t is not None]
    return c, torch.autograd.grad((c * w).sum(), leaves)


def inf_diff(a, b):
    """max_diff where equal infinities (the semiring zero carried at leading pads) count as 0."""
    same = a == b
    return max_diff(a.masked_fill(same, 0), b.masked_fill(same, 0))


def compare(name, z, u, c0, mask=None, **kw):
    """Largest differences (outputs, gradients) between the fast scan and the reference."""
    w = torch.randn(z.shape, dtype=z.dtype, device=z.device)
    c, g = outputs_and_grads(elementwise_scan, name, z, u, c0, mask, w, **kw)
    c_ref, g_ref = outputs_and_grads(elementwise_scan_ref, name, z, u, c0, mask, w)
    return inf_diff(c, c_ref), max(max_diff(a, b) for a, b in zip(g, g_ref))


# ---- semirings ----------------------------------------------------------------------------

@pytest.mark.parametrize("name", NAMES)
def test_semiring_laws_on_tensors(name):
    sr = SEMIRINGS[name]
    a = torch.randn(3, 4, dtype=F64)
    b = torch.randn(3, 4, dtype=F64)
    c = torch.randn(3, 4, dtype=F64)
    zero = torch.full_like(a, sr.zero)
    one = torch.full_like(a, sr.one)
    assert torch.equal(sr.plus(zero, a), a) and torch.equal(sr.plus(a, zero), a)      # (+)-identity
    assert torch.equal(sr.times(zero, a), zero) and torch.equal(sr.times(a, zero), zero)  # annihilator
    assert torch.equal(sr.times(one, a), a) and torch.equal(sr.times(a, one), a)      # (x)-identity
    assert torch.equal(sr.plus(a, b), sr.plus(b, a))
    assert max_diff(sr.times(a, sr.plus(b, c)), sr.plus(sr.times(a, b), sr.times(a, c))) < 1e-12
    assert max_diff(sr.plus(sr.plus(a, b), c), sr.plus(a, sr.plus(b, c))) < 1e-12
    assert sr.is_idempotent == torch.equal(sr.plus(a, a), a)
    # reductions agree with folding the binary operations
    x = torch.randn(5, 3, dtype=F64)
    fold_sum, fold_prod = x[0], x[0]
    for i in range(1, 5):
        fold_sum, fold_prod = sr.plus(fold_sum, x[i]), sr.times(fold_prod, x[i])
    assert max_diff(sr.sum(x, 0), fold_sum) < 1e-12
    assert max_diff(sr.prod(x, 0), fold_prod) < 1e-12
    assert max_diff(sr.sum(x, -1), sr.sum(x.t(), 0)) < 1e-12
    assert torch.equal(sr.sum(x.new_empty(0, 3), 0), torch.full((3,), sr.zero, dtype=F64))
    assert torch.equal(sr.prod(x.new_empty(2, 0), 1), torch.full((2,), sr.one, dtype=F64))
    # a Python number beside a tensor
    assert torch.equal(sr.plus(a, sr.zero), a) and torch.equal(sr.plus(sr.zero, a), a)


@pytest.mark.parametrize("name", NAMES)
def test_semiring_on_python_floats(name):
    sr = SEMIRINGS[name]
    xs = [0.3, -1.2, 2.5]
    for a in xs:
        assert sr.plus(sr.zero, a) == a and sr.times(sr.one, a) == a and sr.times(sr.zero, a) == sr.zero
        for b in xs:
            t = sr.plus(torch.tensor(a, dtype=F64), torch.tensor(b, dtype=F64)).item()
            assert isinstance(sr.plus(a, b), float) and abs(sr.plus(a, b) - t) < 1e-12
            assert abs(sr.times(a, b) - sr.times(torch.tensor(a, dtype=F64), b).item()) < 1e-12
    assert abs(sr.sum(xs) - sr.sum(torch.tensor(xs, dtype=F64)).item()) < 1e-12
    assert abs(sr.prod(xs) - sr.prod(torch.tensor(xs, dtype=F64)).item()) < 1e-12
    assert sr.sum([]) == sr.zero and sr.prod([]) == sr.one


def test_semiring_values_and_lookup():
    assert (REAL.zero, REAL.one, MAX_PLUS.zero, LOG.zero, MIN_PLUS.zero) == (0, 1, -math.inf, -math.inf, math.inf)
    assert MAX_PLUS.is_idempotent and MIN_PLUS.is_idempotent and not REAL.is_idempotent and not LOG.is_idempotent
    assert LOG.plus(-math.inf, -math.inf) == -math.inf and LOG.plus(1.0, 1.0) == 1.0 + math.log(2)
    assert get_semiring("max-plus") is MAX_PLUS and get_semiring(LOG) is LOG
    assert Semiring("log", -math.inf, 0.0) == LOG and hash(Semiring("log", -math.inf, 0.0)) == hash(LOG)
    with pytest.raises(RnnlensError, match="real, max-plus, log, min-plus"):
        get_semiring("max-times")
    with pytest.raises(RnnlensError):
        Semiring("boolean", 0.0, 1.0)


# ---- fast scan == reference ----------------------------------------------------------------

@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("T,chunk", [(1, None), (7, None), (35, None), (100, None), (35, 8), (29, 3),
                                     (9, 1), (5, 64)])
@pytest.mark.parametrize("masked", [False, True])
def test_fast_equals_reference(name, T, chunk, masked):
    z, u, c0 = inputs(name, 3, T, 5)
    mask = torch.rand(3, T) > 0.3 if masked else None
    dc, dg = compare(name, z, u, c0, mask, chunk=chunk)
    assert dc < 1e-12 and dg < 1e-10


@pytest.mark.parametrize("name", NAMES)
def test_default_start_is_the_semiring_zero(name):
    z, u, _ = inputs(name, 2, 20, 3, c0=False)
    mask = torch.ones(2, 20, dtype=torch.bool)
    mask[0, :4] = False                                 # left padding: the zero state is carried
    dc, dg = compare(name, z, u, None, mask)
    assert dc < 1e-12 and dg < 1e-12


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("strong_forgetting", [False, True])
def test_long_float32_sequence_is_finite_and_matches(name, strong_forgetting):
    """T = 4096 in float32 with gates in (0,1) from sigmoids: no overflow or underflow to NaN.
    With strong forgetting (gates sigma(3z - 4), mostly < 0.1) the gate products of a chunk
    underflow to 0 in float32, which must stay harmless."""
    T = 4096
    z, u, c0 = inputs(name, 2, T, 8, dtype=torch.float32)
    if strong_forgetting:
        z = (3 * z - 4).detach().requires_grad_()
    w = torch.randn(2, T, 8)
    c, g = outputs_and_grads(elementwise_scan, name, z, u, c0, weight=w)
    assert torch.isfinite(c).all() and all(torch.isfinite(t).all() for t in g)
    c_ref, g_ref = outputs_and_grads(elementwise_scan_ref, name, z, u, c0, weight=w)
    z64, u64, s64 = (t.detach().double().requires_grad_() for t in (z, u, c0))
    c64, g64 = outputs_and_grads(elementwise_scan_ref, name, z64, u64, s64, weight=w.double())
    print(f"{name}, T={T}, float32: fast vs float32 loop (c, then dz, du, dc0), then vs float64 loop:")
    assert max_diff(c, c_ref) < 1e-5 and max(max_diff(a, b) for a, b in zip(g, g_ref)) < 1e-5
    assert max_diff(c.double(), c64) < 1e-5 and max(max_diff(a.double(), b) for a, b in zip(g, g64)) < 1e-5


@pytest.mark.parametrize("name", ["real", "log", "max-plus"])
@pytest.mark.parametrize("masked", [False, True])
def test_gradcheck(name, masked):
    z, u, c0 = inputs(name, 2, 6, 3)
    mask = torch.tensor([[True] * 6, [True, False, True, True, False, True]]) if masked else None

    def fn(z, u, c0):
        return elementwise_scan(gates(z, name), u, c0, mask, semiring=name, chunk=4)[0]

    assert torch.autograd.gradcheck(fn, (z, u, c0))


# ---- hand-made cases ----------------------------------------------------------------------

def _grads_of(c_index, f, u, c0, name, chunk):
    f, u, c0 = (torch.tensor(x, dtype=F64).view(1, -1, 1).requires_grad_() for x in (f, u, c0))
    c0v = c0.view(1, 1)
    c, _ = elementwise_scan(f, u, c0v, semiring=name, chunk=chunk)
    c[0, c_index, 0].backward()
    return c.flatten().tolist(), f.grad.flatten().tolist(), u.grad.flatten().tolist(), c0.grad.item()


@pytest.mark.parametrize("chunk", [1, 2, None])
def test_max_plus_gradient_goes_to_the_argmax(chunk):
    f, u, c0 = [-1.0, -1.0, -1.0], [0.5, -2.0, 3.0], [0.0]
    # c1 = max(-1 + 0, 0.5) = 0.5 (u wins), c2 = max(-0.5, -2) = -0.5 (carry), c3 = 3 (u wins)
    c, df, du, dc0 = _grads_of(1, f, u, c0, "max-plus", chunk)
    assert c == [0.5, -0.5, 3.0]
    assert (df, du, dc0) == ([0.0, 1.0, 0.0], [1.0, 0.0, 0.0], 0.0)      # dc2 = d(f2 + u1)
    c, df, du, dc0 = _grads_of(2, f, u, c0, "max-plus", chunk)
    assert (df, du, dc0) == ([0.0, 0.0, 0.0], [0.0, 0.0, 1.0], 0.0)
    # min-plus mirrors it: c1 = min(1 + 0, -0.5) = -0.5, c2 = min(0.5, 2) = 0.5 (carry)
    c, df, du, dc0 = _grads_of(1, [1.0, 1.0, 1.0], [-0.5, 2.0, -3.0], c0, "min-plus", chunk)
    assert c == [-0.5, 0.5, -3.0] and (df, du, dc0) == ([0.0, 1.0, 0.0], [1.0, 0.0, 0.0], 0.0)


def test_max_plus_tie_goes_to_the_carried_branch():
    # c1 = max(0 + 1, 1): a tie; the whole gradient goes to f1 and c0, none to u1
    c, df, du, dc0 = _grads_of(0, [0.0, -1.0], [1.0, -5.0], [1.0], "max-plus", None)
    assert c == [1.0, 0.0] and (df, du, dc0) == ([1.0, 0.0], [0.0, 0.0], 1.0)


def test_log_gradient_is_the_softmax_of_the_branches():
    # c1 = logaddexp(f1 + c0, u1) with f1 + c0 = log 3, u1 = log 1: weights 3/4 and 1/4
    c, df, du, dc0 = _grads_of(0, [math.log(3.0)], [0.0], [0.0], "log", None)
    assert abs(c[0] - math.log(4.0)) < 1e-15
    assert abs(df[0] - 0.75) < 1e-15 and abs(du[0] - 0.25) < 1e-15 and abs(dc0 - 0.75) < 1e-15


# ---- masks and shared parameters -----------------------------------------------------------

@pytest.mark.parametrize("name", NAMES)
def test_masked_rows_equal_each_sequence_alone(name):
    lengths = [9, 3, 6, 1]
    B, T, D = len(lengths), max(lengths), 4
    z, u, c0 = inputs(name, B, T, D)
    mask = torch.arange(T)[None] < torch.tensor(lengths)[:, None]
    w = torch.randn(B, T, D, dtype=F64) * mask[..., None]               # loss on real tokens only
    c, (gz, gu, gc0) = outputs_and_grads(elementwise_scan, name, z, u, c0, mask, w, chunk=4)
    for b, n in enumerate(lengths):
        zb, ub = (t[b:b + 1, :n].detach().requires_grad_() for t in (z, u))
        cb = c0[b:b + 1].detach().requires_grad_()
        alone, (az, au, ac0) = outputs_and_grads(elementwise_scan, name, zb, ub, cb, None, w[b:b + 1, :n], chunk=4)
        assert max_diff(c[b, :n], alone[0]) < 1e-12
        assert torch.equal(c[b, n:], c[b, n - 1].expand(T - n, D))        # pads keep the state
        assert max_diff(gz[b, :n], az[0]) < 1e-12 and max_diff(gu[b, :n], au[0]) < 1e-12
        assert max_diff(gc0[b], ac0[0]) < 1e-12
        assert not gz[b, n:].any() and not gu[b, n:].any()                # pads get no gradient


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("scan", [elementwise_scan, elementwise_scan_ref])
def test_shared_parameter_gradient_is_summed_over_the_batch(name, scan):
    """A bias b [D] shared by every row (like the rational RNN's eps): its gradient is the sum
    of the per-row gradients. The authors' kernel overwrote it with one row's (NOTES.md)."""
    B, T, D = 4, 13, 3
    x = torch.randn(B, T, D, dtype=F64)
    f = gates(torch.randn(B, T, D, dtype=F64), name)
    b = torch.randn(D, dtype=F64, requires_grad=True)
    c0 = torch.randn(D, dtype=F64, requires_grad=True)                  # a shared start state
    w = torch.randn(B, T, D, dtype=F64)
    mask = torch.rand(B, T) > 0.2
    (scan(f, x * b, c0, mask, semiring=name)[0] * w).sum().backward()
    total_b, total_c0 = b.grad.clone(), c0.grad.clone()
    rows_b, rows_c0 = torch.zeros_like(total_b), torch.zeros_like(total_c0)
    for i in range(B):
        b.grad = c0.grad = None
        (scan(f[i:i + 1], x[i:i + 1] * b, c0, mask[i:i + 1], semiring=name)[0] * w[i:i + 1]).sum().backward()
        rows_b += b.grad
        rows_c0 += c0.grad
    assert max_diff(total_b, rows_b) < 1e-12 and max_diff(total_c0, rows_c0) < 1e-12
    # u itself broadcast from [D]: summed over batch and time
    b.grad = None
    (scan(f, b, semiring=name)[0] * w).sum().backward()
    b2 = b.detach().expand(B, T, D).clone().requires_grad_()
    (scan(f, b2, semiring=name)[0] * w).sum().backward()
    expected = b2.grad.sum((0, 1))
    assert max_diff(b.grad, expected) < 1e-12


# ---- arguments, devices ---------------------------------------------------------------------

def test_arguments():
    f = torch.rand(2, 5, 3)
    c, final = elementwise_scan(f[:, :0], f[:, :0], f[:, 0])
    assert c.shape == (2, 0, 3) and torch.equal(final, f[:, 0])                # no steps: the start state
    assert default_chunk(1) == 1 and default_chunk(35) == 8 and default_chunk(1024) == 32 and default_chunk(10**5) == 64
    with pytest.raises(RnnlensError, match="real, max-plus"):
        elementwise_scan(f, f, semiring="tropical")
    with pytest.raises(RnnlensError, match="mask"):
        elementwise_scan(f, f, mask=torch.ones(2, 4, dtype=torch.bool))
    with pytest.raises(RnnlensError, match="chunk"):
        elementwise_scan(f, f, chunk=0)
    with pytest.raises(RnnlensError, match=r"\[B,T,D\]"):
        elementwise_scan(f[0], f[0])


@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device")
@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_cuda(name, dtype):
    z, u, c0 = inputs(name, 3, 50, 7, dtype=dtype, device="cuda")
    mask = torch.rand(3, 50, device="cuda") > 0.3
    dc, dg = compare(name, z, u, c0, mask)
    tol = 1e-12 if dtype == F64 else 1e-4
    assert dc < tol and dg < 100 * tol
    z, u, c0 = inputs(name, 2, 4096, 8, dtype=torch.float32, device="cuda")
    c, g = outputs_and_grads(elementwise_scan, name, z, u, c0)
    assert c.is_cuda and torch.isfinite(c).all() and all(torch.isfinite(t).all() for t in g)


def test_log_semiring_gradient_is_zero_not_nan_where_every_term_is_minus_inf():
    a = torch.tensor([-math.inf, -math.inf, 0.0], dtype=F64, requires_grad=True)
    b = torch.tensor([-math.inf, 1.0, math.log(3.0)], dtype=F64, requires_grad=True)
    out = LOG.plus(a, b)
    assert out[0] == -math.inf and out[1] == 1.0 and abs(out[2] - math.log(4.0)) < 1e-15
    out.backward(torch.ones(3, dtype=F64))
    assert max_diff(a.grad, torch.tensor([0.0, 0.0, 0.25], dtype=F64)) < 1e-15
    assert max_diff(b.grad, torch.tensor([0.0, 1.0, 0.75], dtype=F64)) < 1e-15
    x = torch.tensor([[-math.inf, -math.inf], [0.0, math.log(3.0)]], dtype=F64, requires_grad=True)
    s = LOG.sum(x, 1)
    assert s[0] == -math.inf and abs(s[1] - math.log(4.0)) < 1e-15
    s.backward(torch.ones(2, dtype=F64))
    assert max_diff(x.grad, torch.tensor([[0.0, 0.0], [0.25, 0.75]], dtype=F64)) < 1e-15
