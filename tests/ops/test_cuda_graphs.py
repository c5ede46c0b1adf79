"""CUDA graphs of the fused scans' loops (rnnlens.ops.graphs): on a GPU, every registered cell
with graphs on equals the same cell on the CPU (values and gradients of x, the start state and
every parameter, float64, left, inside and trailing pads), over several replays with new
inputs and two shapes; and the scans equal their eager loops with graphs off. Without a CUDA
device only the dispatch rules are checked."""
import pytest
import torch

from tests.support import E, make, max_diff
from rnnlens.cells import CELLS
from rnnlens.ops import graphs
from rnnlens.ops.affine import lstm_scan, structured_scan
from rnnlens.ops.table_scan import table_scan

cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")


def masked(B: int, T: int) -> torch.Tensor:
    """Left pads (row 0), an inside pad (row 1), trailing pads (row 2), no pad elsewhere
    (the rows there are)."""
    mask = torch.ones(B, T, dtype=torch.bool)
    for row, cols in ((0, slice(0, 2)), (1, T // 2), (2, slice(T - 3, T))):
        if row < B:
            mask[row, cols] = False
    return mask


def grads(cell, x, mask, s0, R, r):
    """(out, final, dx, ds0, every parameter's gradient) of a fixed projection of the outputs."""
    cell.zero_grad(set_to_none=True)
    x, s0 = x.clone().requires_grad_(), s0.clone().requires_grad_()
    out, fin = cell(x, mask, s0)
    ((out * R).sum() + (fin * r).sum()).backward()
    params = [p.grad if p.grad is not None else torch.zeros_like(p) for p in cell.parameters()]
    return [out.detach(), fin.detach(), x.grad, s0.grad, *params]


@cuda
@pytest.mark.parametrize("name", list(CELLS))
def test_every_cell_on_cuda_with_graphs_equals_the_cpu(name):
    graphs.set_enabled(True)
    cpu = make(name)
    gpu = make(name).cuda()
    g = torch.Generator().manual_seed(5)
    # a key's second call captures its graph and the third replays it: new inputs each time
    for B, T in ((4, 9), (4, 9), (5, 13), (4, 9), (5, 13), (5, 13), (4, 9)):
        x = torch.randn(B, T, E, generator=g, dtype=torch.float64)
        s0 = torch.randn(B, cpu.state_size, generator=g, dtype=torch.float64)
        R = torch.randn(B, T, cpu.hidden_size, generator=g, dtype=torch.float64)
        r = torch.randn(B, cpu.state_size, generator=g, dtype=torch.float64)
        mask = masked(B, T)
        want = grads(cpu, x, mask, s0, R, r)
        got = grads(gpu, *(t.cuda() for t in (x, mask, s0, R, r)))
        for i, (a, b) in enumerate(zip(got, want)):
            assert max_diff(a.cpu(), b) <= 1e-9 * max(1.0, b.abs().max().item()), (name, B, T, i)


def _scan_inputs(B, T, H, K, device, dtype=torch.float32, seed=0):
    g = torch.Generator(device=device).manual_seed(seed)

    def r(*shape, scale=1.0):
        return (torch.randn(*shape, generator=g, device=device, dtype=dtype) * scale).requires_grad_()

    return r, masked(B, T).to(device)


def _run(fn, args):
    out, fin = fn(*args)
    torch.manual_seed(0)
    loss = (out * torch.randn_like(out)).sum() + (fin * torch.randn_like(fin)).sum()
    leaves = [a for a in args if isinstance(a, torch.Tensor) and a.requires_grad]
    return [out.detach(), fin.detach(), *torch.autograd.grad(loss, leaves)]


@cuda
@pytest.mark.parametrize("kind", ["structured", "lstm", "lstm-no-f", "table"])
@pytest.mark.parametrize("with_mask", [False, True])
def test_graphed_scans_equal_their_eager_loops(kind, with_mask, monkeypatch):
    """Forward and backward loops replayed (captured at a key's first call here) against the
    eager loops, on new inputs at every call and three lengths."""
    monkeypatch.setattr(graphs, "SEEN_BEFORE_CAPTURE", 1)
    graphs.clear()
    B, H = 6, 32
    for T in (1, 17, 17, 40, 17, 1):
        r, mask = _scan_inputs(B, T, H, 3, "cuda", seed=T)
        mask = mask if with_mask else None
        if kind == "structured":
            fn = structured_scan
            args = (r(B, T, H), r(3 * H, H, scale=0.2), r(B, T, 3 * H), r(B, T, H), r(B, H), mask)
        elif kind == "table":               # the URN's scan: 5 words' matrices, dropout on h and on A
            fn = table_scan
            idx = torch.randint(0, 5, (B, T), generator=torch.Generator().manual_seed(T)).cuda()
            d = (torch.rand(B, H, device="cuda") > 0.3).float() / 0.7
            M = (torch.rand(B, H, H, device="cuda") > 0.2).float() / 0.8
            args = (r(5, H, H, scale=0.2), idx, r(B, T), d, M, r(B, H), mask)
        else:
            K = 4 if kind == "lstm" else 3
            fn = lstm_scan
            a = [r(B, T, H, scale=0.5) for _ in range(5)]
            args = (r(B, T, 2 * H), r(K * H, H, scale=0.2), *a,
                    r(B, T, H, scale=0.5) if K == 4 else None, r(B, 2 * H), mask)
        on = _run(fn, args)
        assert any(k[0] == f"{fn.__name__.split('_')[0]}_forward" for k in graphs._cache), list(graphs._cache)
        assert any(k[0] == f"{fn.__name__.split('_')[0]}_backward" for k in graphs._cache), list(graphs._cache)
        old = graphs._enabled
        graphs._enabled = False
        off = _run(fn, args)
        graphs._enabled = old
        for i, (a, b) in enumerate(zip(on, off)):
            # the absolute tolerance scales with the tensor: the table's gradient is summed over
            # the words by index_add_, whose atomic adds on a GPU take no fixed order, so an
            # entry of order 1e4 may differ by float32 rounding between two runs of either loop
            scale = max(1.0, b.abs().max().item())
            assert torch.allclose(a, b, rtol=1e-5, atol=1e-5 * scale), (kind, T, i, max_diff(a, b))


@cuda
def test_graphs_are_made_at_a_shapes_second_call_and_kept_bounded(monkeypatch):
    monkeypatch.setattr(graphs, "MAX_GRAPHS", 3)
    graphs.clear()

    def scan(T):
        r, _ = _scan_inputs(2, T, 8, 3, "cuda")
        structured_scan(r(2, T, 8), r(24, 8), r(2, T, 24), r(2, T, 8))   # forward only: one graph

    scan(2)
    assert not graphs._cache
    scan(2)
    assert len(graphs._cache) == 1
    for T in range(3, 8):
        scan(T)
        scan(T)
    assert len(graphs._cache) == 3
    monkeypatch.setattr(graphs, "MAX_BYTES", 10)            # a graph that alone needs more: never made
    graphs.clear()
    for _ in range(3):
        scan(4)
    assert not graphs._cache
    graphs.clear()


def test_graphs_leave_cpu_tensors_and_long_inputs_to_the_eager_loop(monkeypatch):
    calls = []

    def fn(a, b):
        calls.append(1)
        return (a + 1, b)

    a = torch.zeros(2, 3)
    out = graphs.run("test", fn, a, None)
    assert calls and torch.equal(out[0], a + 1) and out[1] is None
    assert not graphs.applies(a, 3)
    if torch.cuda.is_available():
        c = a.cuda()
        assert not graphs.applies(c, 3)             # autograd records (create_graph): run as it is
        with torch.no_grad():                       # as in a Function's forward and backward
            assert graphs.applies(c, 3) and not graphs.applies(c, graphs.MAX_STEPS + 1)
            monkeypatch.setattr(graphs, "_enabled", False)
            assert not graphs.applies(c, 3)


def test_the_cache_policy_without_a_gpu(monkeypatch):
    """ops.graphs' policy, with a stand-in for CUDA's capture (it keeps fn and its input buffers
    and runs fn on them at replay): a key's first call runs eagerly, its second runs eagerly and
    captures, later calls copy new inputs in and replay; every call returns fresh tensors equal
    to fn's; a new shape is a new key; at most MAX_GRAPHS are kept, the least recently used
    dropped first, and none that alone needs more than the byte limit."""
    import contextlib

    class Stand:
        def __init__(self, fn, ins):
            self.fn, self.ins, self.replays = fn, ins, 0
            self.outs = tuple(fn(*ins))

        def replay(self):
            self.replays += 1
            for o, new in zip(self.outs, self.fn(*self.ins)):
                o.copy_(new)

    def capture(fn, inputs, stream):
        ins = tuple(None if t is None else t.detach().clone() for t in inputs)
        g = Stand(fn, ins)
        return graphs._Graph(g, ins, g.outs)

    monkeypatch.setattr(graphs, "applies", lambda t, steps: True)
    monkeypatch.setattr(graphs, "_capture", capture)
    monkeypatch.setattr(graphs, "_max_bytes", lambda device: 10 ** 9)
    monkeypatch.setattr(torch.cuda, "device", lambda d: contextlib.nullcontext())
    monkeypatch.setattr(torch.cuda, "Stream", lambda d=None: None)
    monkeypatch.setattr(graphs, "MAX_GRAPHS", 2)
    graphs.clear()
    calls = []

    def fn(a, b, c):
        calls.append(a.shape)
        return (a.cumsum(1) * 2 + (0 if c is None else c.sum()), b + 1)

    def check(T, seed):
        g = torch.Generator().manual_seed(seed)
        a, b = torch.randn(3, T, 2, generator=g), torch.randn(4, generator=g)
        got = graphs.run("f", fn, a, b, None)
        want = (a.cumsum(1) * 2, b + 1)
        assert all(torch.equal(x, y) for x, y in zip(got, want))
        return got

    check(5, 0)
    assert not graphs._cache                                   # first call: eager only
    check(5, 1)
    assert len(graphs._cache) == 1                             # second: eager, then captured
    kept = next(iter(graphs._cache.values()))
    first = check(5, 2)                                        # third: a replay on new inputs
    assert kept.graph.replays == 1
    second = check(5, 3)
    assert kept.graph.replays == 2 and first[0].data_ptr() != second[0].data_ptr()
    assert not torch.equal(first[0], second[0])                # the first result was not overwritten
    for T in (6, 6, 7, 7):                                     # two more keys: the least recent (5) goes
        check(T, T)
    assert [k[1][0] for k in graphs._cache] == [(3, 6, 2), (3, 7, 2)]
    monkeypatch.setattr(graphs, "_max_bytes", lambda device: 8)
    graphs.clear()
    for seed in range(3):
        check(9, seed)
    assert not graphs._cache                                   # over the byte limit alone: never kept
    monkeypatch.setattr(graphs, "_max_bytes", lambda device: 10 ** 9)

    def refuse(fn, inputs, stream):
        raise RuntimeError("operation not permitted when stream is capturing")

    monkeypatch.setattr(graphs, "_capture", refuse)
    graphs.clear()
    check(4, 0)
    with pytest.warns(RuntimeWarning, match="no CUDA graph for f"):
        check(4, 1)                                            # the capture fails: a warning, eager
    import warnings
    with warnings.catch_warnings():
        warnings.simplefilter("error")                         # once for the key: no capture again
        for seed in range(2, 5):
            check(4, seed)
    assert not graphs._cache
    graphs.clear()
