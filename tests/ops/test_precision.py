"""Mixed precision: every cell under bfloat16 autocast against its float64 self, the float32
state over long inputs, the scans' and `linear`'s dtype handling, and `--precision bf16`.

Autocast on the CPU (torch.autocast("cpu", dtype=torch.bfloat16)) runs the code a GPU runs
under autocast("cuda"): products in bfloat16, the recurrences in float32 (ops/precision.py).
"""
import copy
import json

import pytest
import torch

from tests.support import run_cli
from rnnlens.cells import CELLS
from rnnlens.errors import RnnlensError
from rnnlens.ops import linear as L
from rnnlens.ops.affine import affine_scan_ref, lstm_scan, structured_scan
from rnnlens.ops.elementwise import elementwise_scan, elementwise_scan_ref
from rnnlens.ops.precision import autocast_dtype, full_precision

B, T, E, H = 3, 7, 5, 4
# bfloat16 keeps 8 bits of mantissa (relative rounding 2^-9 = 2e-3); products of bfloat16
# inputs, summed over a few steps, measured 2e-3..7e-3 of relative error (norm of the
# difference over the norm of the reference) on every cell; one tolerance for all families.
TOL = 3e-2

def bf16():
    return torch.autocast("cpu", dtype=torch.bfloat16)


def rel(a: torch.Tensor, ref: torch.Tensor) -> float:
    """|a - ref| / |ref| (Frobenius norms), a taken in ref's dtype."""
    return ((a.to(ref.dtype) - ref).norm() / ref.norm().clamp(min=1e-30)).item()


def padded_mask(B: int, T: int) -> torch.Tensor:
    """Left padding (row 0), interior padding (row 1), right padding (row 2)."""
    mask = torch.ones(B, T, dtype=torch.bool)
    mask[0, :2] = False
    mask[1, T // 2] = False
    mask[2, -2:] = False
    return mask


def run(cell, x, mask, autocast: bool, wo=None, wf=None):
    """(out, final, {parameter: grad}, x.grad) of a forward (under bfloat16 autocast or not)
    and a backward (outside it) of a fixed random projection of out and final."""
    cell.zero_grad(set_to_none=True)
    x = x.detach().clone().requires_grad_(True)
    with torch.autocast(x.device.type, dtype=torch.bfloat16, enabled=autocast):
        out, final = cell(x, mask)
    loss = (out.to(wo.dtype) * wo).sum() + (final.to(wf.dtype) * wf).sum()
    loss.backward()
    return out, final, {n: p.grad for n, p in cell.named_parameters()}, x.grad


def compare(cell32, x64, mask, tol=TOL):
    """Run cell32 under bfloat16 autocast and its float64 copy plainly; check dtypes, NaN and
    the relative error of outputs, final state and every gradient."""
    cell64 = copy.deepcopy(cell32).double()
    wo = torch.randn(*x64.shape[:2], cell32.hidden_size, dtype=torch.float64, device=x64.device)
    wf = torch.randn(x64.shape[0], cell32.state_size, dtype=torch.float64, device=x64.device)
    o64, f64, g64, dx64 = run(cell64, x64, mask, False, wo, wf)
    out, final, grads, dx = run(cell32, x64.float(), mask, True, wo, wf)
    assert out.dtype == torch.float32 and final.dtype == torch.float32, (out.dtype, final.dtype)
    errors = {"out": rel(out, o64), "final": rel(final, f64), "x.grad": rel(dx, dx64)}
    for name, p in cell32.named_parameters():
        if g64[name] is None:
            assert grads[name] is None, name
            continue
        assert grads[name].dtype == p.dtype == torch.float32, (name, grads[name].dtype)
        assert torch.isfinite(grads[name]).all(), name
        errors[name + ".grad"] = rel(grads[name], g64[name])
    assert torch.isfinite(out).all() and torch.isfinite(final).all() and torch.isfinite(dx).all()
    worst = max(errors, key=errors.get)
    print(f"largest relative error: {worst} {errors[worst]:.3e}")
    assert errors[worst] < tol, errors
    return errors, out, o64


@pytest.mark.parametrize("name", list(CELLS))
@pytest.mark.parametrize("onednn", [True, False], ids=["onednn", "torch-mm"])
def test_every_cell_under_bf16_autocast_matches_float64(name, onednn, monkeypatch):
    """With oneDNN's products (not autocast on the CPU) and with torch.mm's (autocast to bfloat16,
    as cuBLAS's are on a GPU)."""
    monkeypatch.setattr(L, "_enabled", onednn)
    torch.manual_seed(0)
    cell = CELLS[name](E, H)
    x = torch.randn(B, T, E, dtype=torch.float64)
    compare(cell, x, padded_mask(B, T))


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
@pytest.mark.parametrize("name", list(CELLS))
@pytest.mark.parametrize("right_padded", [False, True], ids=["any-pads", "right-pads"])
def test_every_cell_under_cuda_bf16_autocast_matches_float64(name, right_padded):
    """On a GPU: autocast("cuda") (cuBLAS bfloat16 products, cuDNN for the classic cells on
    right-padded rows, the Triton scans and CUDA graphs where they apply) against float64."""
    torch.manual_seed(0)
    cell = CELLS[name](E, H).cuda()
    x = torch.randn(B, T, E, dtype=torch.float64, device="cuda")
    mask = padded_mask(B, T)
    if right_padded:
        mask = torch.arange(T)[None] < torch.tensor([T, T - 2, 3])[:, None]
    compare(cell, x, mask.cuda())


@pytest.mark.parametrize("name", ["elman", "gru", "lstm"])
@pytest.mark.parametrize("masked", [False, True])
def test_classic_fused_kernels_under_autocast(name, masked):
    """Right padding (or none) takes torch's fused kernel, which runs in float32 under autocast."""
    cell = CELLS[name](E, H)
    mask = None
    if masked:
        mask = torch.ones(B, T, dtype=torch.bool)
        mask[0, -3:] = False
    assert cell._can_fuse(torch.zeros(B, T, E), mask)
    compare(cell, torch.randn(B, T, E, dtype=torch.float64), mask)


@pytest.mark.parametrize("fused", [True, False])
def test_lstm_cell_state_takes_increments_below_bf16_resolution(fused):
    """A hand-set LSTM whose cell state starts at 1 and gains i*g ~ 1e-3 a step (f ~ 1): after
    512 steps c is about 1.51 (float64). A bfloat16 cell state (torch.nn.LSTM's fused CPU
    kernel under autocast) stays at 1.0: its resolution at 1.0 is 2^-7. Ours follows float64."""
    lstm = CELLS["lstm"](1, 2)
    with torch.no_grad():
        for p in lstm.parameters():
            p.zero_()
        lstm.bias_ih[0:2] = -6.9          # i = s(-6.9) ~ 1e-3
        lstm.bias_ih[2:4] = 12.0          # f = 1 - 6e-6
        lstm.bias_ih[4:6] = 5.0           # g = tanh(5) ~ 1
        lstm.bias_ih[6:8] = 10.0          # o ~ 1
    lstm.fused = fused
    x = torch.zeros(1, 512, 1)
    s0 = torch.tensor([[1.0, 1.0, 0.0, 0.0]])          # [c; h]
    ref = copy.deepcopy(lstm).double()(x.double(), None, s0.double())[1]
    with bf16():
        final = lstm(x, None, s0)[1]
    print("c after 512 steps:", ref[0, 0].item(), "float64;", final[0, 0].item(), "bf16 autocast")
    assert 1.5 < ref[0, 0] < 1.52
    # the gates come from bfloat16 products (i = s(-6.9) to 0.5%); a bfloat16 c would be 34% off
    assert final.dtype == torch.float32 and final[0, 0] > 1.5 and rel(final, ref) < 1e-2


# One cell per family. "slow" makes the state remember (a gate that keeps it near 1) and the
# input varies slowly, so every step adds a small increment of the same sign: the case where
# a state carried in bfloat16 stalls.
def _slow_gru(cell):
    cell.bias_ih[H:2 * H] += 5.0          # z ~ 0.99


def _slow_mvma_g(cell):
    cell.base.bias_ih[H:2 * H] += 5.0


def _slow_rrnn_b(cell):
    cell.bias.view(-1, H)[1] += 5.0       # the forget gate's row (rows: u, f)


LONG = {"gru": _slow_gru, "mvma-g": _slow_mvma_g, "rrnn-b": _slow_rrnn_b, "urn": None}


def bf16_state_loop(cell64, x, mask):
    """The float64 cell's step loop with the state rounded to bfloat16 after every step: what
    the cell would give if it carried its state in bfloat16 (and computed all else exactly)."""
    s = cell64.initial_state(x.shape[0], torch.float64)
    outs = []
    with torch.no_grad():
        for t in range(x.shape[1]):
            new = cell64.step(x[:, t], s).bfloat16().double()
            s = torch.where(mask[:, t, None], new, s)
            outs.append(s)
    return cell64.output(torch.stack(outs, 1))


@pytest.mark.parametrize("name", LONG)
def test_length_512_error_stays_bounded(name):
    """512 steps with padding (left, interior and a 30-step gap, right): outputs, final state and
    gradients within the short-input tolerance of float64, the last 64 steps as close as the
    rest; a state rounded to bfloat16 every step misses the same tolerance."""
    # seed 2: here the GRU's gradient of b_hh, summed over the 512 steps in bfloat16 (as autocast
    # does for a weight it casts once), would be 13% off
    torch.manual_seed(2)
    T_long = 512
    cell = CELLS[name](E, H)
    if LONG[name] is not None:
        with torch.no_grad():
            LONG[name](cell)
    x = torch.randn(B, 1, E, dtype=torch.float64) + 0.1 * torch.randn(B, T_long, E, dtype=torch.float64)
    mask = padded_mask(B, T_long)
    mask[1, 100:130] = False
    cell64 = copy.deepcopy(cell).double()
    errors, out, o64 = compare(cell, x, mask)
    tail = rel(out[:, -64:], o64[:, -64:])             # no drift: the last steps are as good
    print(f"length {T_long}: relative error {errors['out']:.2e} overall, {tail:.2e} in the last 64 steps")
    assert tail < TOL
    if LONG[name] is not None:
        # the same check catches a state carried in bfloat16: its error grows past the tolerance
        drift = rel(bf16_state_loop(cell64, x, mask)[:, -64:], o64[:, -64:])
        print(f"a bfloat16 state: {drift:.2e} in the last 64 steps")
        assert drift > TOL and drift > 5 * tail


# --- the ops at their entry --------------------------------------------------------------
def _structured_inputs(dtype):
    K = 3
    g = torch.randn(B, T, H, dtype=dtype)
    W = torch.randn(K * H, H) * 0.3
    coef = torch.rand(B, T, K * H, dtype=dtype) * 0.5
    diag = torch.rand(B, T, H, dtype=dtype)
    return g, W, coef, diag, torch.randn(B, H)


@pytest.mark.parametrize("onednn", [True, False])
def test_fused_scans_run_in_float32_under_autocast(onednn):
    """Inside autocast the structured, LSTM and elementwise scans give exactly what they give
    outside it, forward and backward (backward called inside autocast too): with oneDNN off,
    torch.mm would otherwise autocast (as it does on a GPU)."""
    old = L.set_enabled(onednn)
    try:
        g, W, coef, diag, s0 = _structured_inputs(torch.float32)
        mask = padded_mask(B, T)
        H2 = 2 * H
        gates = [torch.rand(B, T, H) for _ in range(5)]
        cases = {
            "structured": (lambda *a: structured_scan(*a, mask)[0], [g, W, coef, diag, s0]),
            "lstm": (lambda g, W, f, a_i, a_g, a_o, k, s0: lstm_scan(g, W, f, a_i, a_g, a_o, k, None, s0, mask)[0],
                     [torch.randn(B, T, H2), torch.randn(3 * H, H) * 0.3, *gates, torch.randn(B, H2)]),
            "elementwise": (lambda f, u, c0: elementwise_scan(f, u, c0, mask=mask)[0],
                            [torch.rand(B, T, H), torch.randn(B, T, H), torch.randn(B, H)]),
        }
        for name, (fn, inputs) in cases.items():
            results = []
            for autocast in (False, True):
                ins = [t.detach().clone().requires_grad_(True) for t in inputs]
                with torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast):
                    out = fn(*ins)
                    out.backward(torch.ones_like(out))
                results.append((out, [t.grad for t in ins]))
            (o1, g1), (o2, g2) = results
            assert o2.dtype == torch.float32 and torch.equal(o1, o2), name
            for a, b in zip(g1, g2):
                assert torch.equal(a, b), name
    finally:
        L.set_enabled(old)


def test_structured_scan_takes_bf16_inputs_in_float32():
    """bfloat16 g, coef, diag (a view formed under autocast): the state is float32 and equals the
    reference on the same values in float32; the gradients come back in bfloat16."""
    g, W, coef, diag, s0 = _structured_inputs(torch.float32)
    mask = padded_mask(B, T)
    low = [t.bfloat16().requires_grad_(True) for t in (g, coef, diag)]
    states, final = structured_scan(low[0], W, low[1], low[2], s0, mask)
    assert states.dtype == final.dtype == torch.float32
    g32, coef32, diag32 = (t.detach().float().requires_grad_(True) for t in low)
    K = W.shape[0] // H
    A = (coef32.view(B, T, K, H, 1) * W.view(K, H, H)).sum(2) + torch.diag_embed(diag32)
    ref, _ = affine_scan_ref(A, g32 * mask[..., None], s0, mask)
    assert torch.allclose(states, ref, atol=1e-5)
    dy = torch.randn_like(ref)
    grads = torch.autograd.grad(states, low, dy)
    refs = torch.autograd.grad(ref, [g32, coef32, diag32], dy)
    for a, r in zip(grads, refs):
        assert a.dtype == torch.bfloat16
        assert torch.allclose(a.float(), r.bfloat16().float(), rtol=1e-2, atol=1e-2)


@pytest.mark.parametrize("semiring", ["real", "max-plus"])
def test_elementwise_scan_takes_bf16_inputs_in_float32(semiring):
    f = torch.rand(B, T, H)
    if semiring == "max-plus":
        f = torch.log(f)
    u, c0 = torch.randn(B, T, H), torch.randn(B, H)
    mask = padded_mask(B, T)
    fl, ul = f.bfloat16().requires_grad_(True), u.bfloat16().requires_grad_(True)
    c, _ = elementwise_scan(fl, ul, c0, mask, semiring=semiring)
    assert c.dtype == torch.float32
    f32, u32 = fl.detach().float().requires_grad_(True), ul.detach().float().requires_grad_(True)
    ref, _ = elementwise_scan_ref(f32, u32, c0, mask, semiring=semiring)
    assert torch.allclose(c, ref, atol=1e-5)
    dy = torch.randn_like(ref)
    for a, r in zip(torch.autograd.grad(c, [fl, ul], dy), torch.autograd.grad(ref, [f32, u32], dy)):
        assert a.dtype == torch.bfloat16 and torch.allclose(a.float(), r.bfloat16().float(), rtol=1e-2, atol=1e-2)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("bias", [True, False])
def test_linear_under_autocast_is_torch_linear_under_autocast(dtype, bias):
    """Under autocast `linear` computes what F.linear computes there (bfloat16 from float32,
    float64 untouched), values and gradients; outside autocast nothing changes."""
    x = torch.randn(3, 4, 5, dtype=dtype, requires_grad=True)
    w = torch.randn(6, 5, dtype=dtype, requires_grad=True)
    b = torch.randn(6, dtype=dtype, requires_grad=True) if bias else None
    ins = [x, w] + ([b] if bias else [])
    with bf16():
        y = L.linear(x, w, b)
        ref = torch.nn.functional.linear(x, w, b)
    assert y.dtype == ref.dtype == (torch.bfloat16 if dtype == torch.float32 else torch.float64)
    assert torch.equal(y, ref)
    dy = torch.randn_like(y)
    for a, r, t in zip(torch.autograd.grad(y, ins, dy), torch.autograd.grad(ref, ins, dy), ins):
        assert a.dtype == t.dtype and torch.equal(a, r)
    assert L.linear(x, w, b).dtype == dtype


def test_precision_helpers():
    assert autocast_dtype("cpu") is None
    with bf16():
        assert autocast_dtype("cpu") == torch.bfloat16
        assert autocast_dtype("cuda") is None
    t = torch.ones(2, dtype=torch.bfloat16)
    assert full_precision(t).dtype == torch.float32 and full_precision(None) is None
    d = torch.ones(2, dtype=torch.float64)
    assert full_precision(d) is d


# --- training ----------------------------------------------------------------------------
def test_precision_setting_is_validated():
    from rnnlens.config import Config

    assert Config().train.precision == "float32"
    assert Config.from_dict({"train": {"precision": "bf16"}}).train.precision == "bf16"
    with pytest.raises(RnnlensError, match="train.precision 'fp16' is not one of float32, bf16"):
        Config.from_dict({"train": {"precision": "fp16"}})
    with pytest.raises(RnnlensError, match="adaptive_softmax"):
        Config.from_dict({"model": {"adaptive_softmax": [100]}, "train": {"precision": "bf16"}})


def _tiny_model(cell="gru", dtype=torch.float32):
    from rnnlens.models import RNNModel
    from rnnlens.config import Config

    cfg = Config.from_dict({"model": {"cell": cell, "embedding_dim": 8, "hidden_size": 8},
                            "train": {"precision": "bf16", "epochs": 1}})
    return RNNModel(cfg.model, 30, "classify", ["a", "b"]).to(dtype), cfg


def test_trainer_refuses_a_float64_model_with_bf16():
    from rnnlens.train.trainer import Trainer

    model, cfg = _tiny_model(dtype=torch.float64)
    with pytest.raises(RnnlensError, match="train.precision bf16 .* float64 parameters") as e:
        Trainer(model, cfg.train, progress=False)
    assert "\n" not in str(e.value)


@pytest.mark.parametrize("cell", ["gru", "mvma-g", "rrnn-b"])
def test_trainer_runs_forward_and_loss_under_autocast(cell):
    """Training and evaluation both run the model under bfloat16 autocast; the parameters,
    their gradients and the optimizer's state stay float32."""
    from rnnlens.data.batching import BatchIterator
    from rnnlens.data.synthetic import PolarityCorpus
    from rnnlens.data.vocab import Vocab
    from rnnlens.models import RNNModel
    from rnnlens.train.trainer import Trainer

    corpus = PolarityCorpus(seed=0, train_size=64, dev_size=32, test_size=32)
    vocab = Vocab.build(ex.tokens for ex in corpus.split("train"))
    _, cfg = _tiny_model(cell)
    model = RNNModel(cfg.model, len(vocab), "classify", ["negative", "positive"])
    seen = []
    model.head.register_forward_hook(lambda m, i, o: seen.append((m.training, o.dtype, i[0].dtype)))
    trainer = Trainer(model, cfg.train, progress=False)
    hist = trainer.fit(BatchIterator(corpus.split("train"), vocab, 16, seed=0),
                       BatchIterator(corpus.split("dev"), vocab, 16, shuffle=False))
    assert {(training, out) for training, out, _ in seen} == {(True, torch.bfloat16), (False, torch.bfloat16)}
    assert {states for _, _, states in seen} == {torch.float32}        # the cells' outputs
    assert all(p.dtype == torch.float32 and (p.grad is None or p.grad.dtype == torch.float32)
               for p in model.parameters())
    assert all(v.dtype == torch.float32 for s in trainer.optimizer.state.values() for v in s.values()
               if isinstance(v, torch.Tensor) and v.is_floating_point() and v.dim())
    assert all(torch.isfinite(torch.tensor(r["train_loss"])) for r in hist)


def _tsv(tmp_path):
    rows = ["pos\tgood fine great film", "neg\tbad awful dull film", "pos\ta good film", "neg\ta bad film",
            "pos\tgreat and fine", "neg\tdull and awful"] * 4
    for name in ("train", "dev", "test"):
        (tmp_path / f"{name}.tsv").write_text("\n".join(rows) + "\n", encoding="utf-8")
    return ["--corpus", "tsv", *[a for n in ("train", "dev", "test")
                                 for a in (f"--{n}-file", str(tmp_path / f"{n}.tsv"))]]


TINY = ["--embedding-dim", "8", "--hidden-size", "8", "--epochs", "2", "--batch-size", "8", "--quiet"]


@pytest.mark.parametrize("cell", ["gru", "rrnn-b"])
def test_cli_trains_with_bf16(tmp_path, capsys, cell):
    out = tmp_path / "m"
    code, _, err = run_cli(capsys, "train", "--out", out, *_tsv(tmp_path), *TINY, "--cell", cell,
                                "--precision", "bf16")
    assert code == 0, err
    records = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert [r.get("epoch") for r in records] == [1, 2, None]
    assert "dev_accuracy" in records[0] and "test_accuracy" in records[-1]
    assert all(torch.isfinite(torch.tensor(r["train_loss"])) for r in records[:2])
    meta = json.loads((out / "config.json").read_text())
    assert meta["config"]["train"]["precision"] == "bf16"


def test_cli_refuses_bf16_with_a_float64_model(tmp_path, capsys, monkeypatch):
    """The command line builds float32 models; one built in float64 (here by a patched
    build_model) is refused with one line and exit code 2, before any training."""
    from rnnlens.train import run

    build = run.build_model
    monkeypatch.setattr(run, "build_model", lambda *a, **k: build(*a, **k).double())
    out = tmp_path / "m"
    code, _, err = run_cli(capsys, "train", "--out", out, *_tsv(tmp_path), *TINY, "--precision", "bf16")
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert code == 2 and len(lines) == 1 and "Traceback" not in err, err
    assert "train.precision bf16" in lines[0] and "float64" in lines[0]
    assert not out.exists()


def test_cli_refuses_an_unknown_precision(tmp_path, capsys):
    code, _, err = run_cli(capsys, "train", "--out", tmp_path / "m", *TINY, "--precision", "half")
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert code == 2 and len(lines) == 1 and "train.precision 'half' is not one of float32, bf16" in lines[0]
