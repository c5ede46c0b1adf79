"""The first-order approximation error (implicit-ngrams Appendix B.2, eq. 15) and
`rnnlens approx-error`."""
import json
import math

import pytest
import torch

from tests.support import max_diff
from rnnlens.analysis.approx import accumulated_error, approx_error, counted_positions, one_step_error
from rnnlens.cells import CELLS, GRU, Elman
from rnnlens.cli import main
from rnnlens.data.batching import BPTTIterator
from rnnlens.models import RNNModel
from rnnlens.config import ModelConfig

# --- eq. 15 by hand ---------------------------------------------------------------------------
WI = [[1.0], [-0.5]]
BI = [0.1, 0.0]
BH = [0.0, 0.2]
WH = [[0.5, -1.0], [0.8, 0.3]]
XS = [0.7, -1.2, 0.4]


def hand_elman():
    cell = Elman(1, 2).double()
    with torch.no_grad():
        cell.weight_ih.copy_(torch.tensor(WI, dtype=torch.float64))
        cell.weight_hh.copy_(torch.tensor(WH, dtype=torch.float64))
        cell.bias_ih.copy_(torch.tensor(BI, dtype=torch.float64))
        cell.bias_hh.copy_(torch.tensor(BH, dtype=torch.float64))
    return cell


def by_hand(h0=(0.0, 0.0)):
    """h_t = tanh(p_t + W_hh h_{t-1}), ĥ_t = tanh(p_t) + (1 - tanh(p_t)^2) * (W_hh h_{t-1}),
    with p_t = W_ih x_t + b_ih + b_hh; eq. 15 at each t, in plain floats."""
    h, errs = list(h0), []
    for x in XS:
        p = [WI[k][0] * x + BI[k] + BH[k] for k in range(2)]
        Wh = [WH[k][0] * h[0] + WH[k][1] * h[1] for k in range(2)]
        new = [math.tanh(p[k] + Wh[k]) for k in range(2)]
        hat = [math.tanh(p[k]) + (1 - math.tanh(p[k]) ** 2) * Wh[k] for k in range(2)]
        errs.append(math.hypot(new[0] - hat[0], new[1] - hat[1]) / math.hypot(*new))
        h = new
    return errs


def test_hand_set_elman_matches_eq15_by_hand():
    cell = hand_elman()
    x = torch.tensor(XS, dtype=torch.float64).view(1, 3, 1)
    states, _ = cell.scan(x)
    err = one_step_error(cell.linear_view(x), states, None)
    want = by_hand()
    print(err, want)
    assert err.shape == (1, 3)
    assert err[0, 0].item() < 1e-15            # h_0 = 0: g(x_1) = f(x_1, 0) is exact
    assert want[1] > 0.01                      # the case is not trivial
    assert max_diff(err[0], torch.tensor(want, dtype=torch.float64)) < 1e-12


def test_hand_set_elman_with_start_state():
    cell = hand_elman()
    x = torch.tensor(XS, dtype=torch.float64).view(1, 3, 1)
    h0 = torch.tensor([[0.3, -0.6]], dtype=torch.float64)
    states, _ = cell.scan(x, None, h0)
    err = one_step_error(cell.linear_view(x), states, None, s0=h0)
    want = by_hand((0.3, -0.6))
    assert want[0] > 0.01
    assert max_diff(err[0], torch.tensor(want, dtype=torch.float64)) < 1e-12


def test_padding_and_zero_states_are_not_counted_and_nan_free():
    cell = hand_elman()
    x = torch.tensor(XS, dtype=torch.float64).view(1, 3, 1).repeat(2, 1, 1)
    mask = torch.tensor([[True, True, True], [True, True, False]])
    states, _ = cell.scan(x, mask)
    err = one_step_error(cell.linear_view(x, mask), states, mask)
    alone = one_step_error(cell.linear_view(x[1:, :2]), cell.scan(x[1:, :2])[0], None)
    assert err[1, 2].item() == 0.0
    assert max_diff(err[1, :2], alone[0]) < 1e-15
    # A cell whose states are all zero: no relative error anywhere, and no NaN.
    with torch.no_grad():
        for p in cell.parameters():
            p.zero_()
    states, _ = cell.scan(x, mask)
    view = cell.linear_view(x, mask)
    assert not counted_positions(view, states, mask).any()
    for f in (one_step_error, accumulated_error):
        e = f(view, states, mask)
        assert torch.isfinite(e).all() and (e == 0).all()


def test_lstm_error_is_on_the_h_half():
    torch.manual_seed(3)
    cell = CELLS["lstm"](3, 4).double()
    x = torch.randn(2, 5, 3, dtype=torch.float64)
    states, _ = cell.scan(x)
    view = cell.linear_view(x)
    err = one_step_error(view, states, None)
    prev = torch.cat([torch.zeros_like(states[:, :1]), states[:, :-1]], 1)
    for t in range(5):
        hat = view.matrix(t) @ prev[:, t, :, None]
        hat = hat[..., 0] + view.g[:, t]
        want = (states[:, t, 4:] - hat[:, 4:]).norm(dim=-1) / states[:, t, 4:].norm(dim=-1)
        assert max_diff(err[:, t], want) < 1e-12


# --- exact cells ---------------------------------------------------------------------------------
def _exact_real(name):
    view = CELLS[name](2, 4).linear_view(torch.zeros(1, 1, 2))            # 4: mm needs d*d
    return view.exact and view.semiring == "real"        # (eq. 15 is a real-semiring error)


EXACT = [n for n in CELLS if _exact_real(n)]


def test_there_are_exact_cells():
    assert {"mvma-g", "mvma-l", "mvm-g", "mvma-me", "gru-approx"} <= set(EXACT)


@pytest.mark.parametrize("name", EXACT)
def test_exact_cells_have_zero_error(name):
    torch.manual_seed(1)
    cell = CELLS[name](5, 4).double()
    x = torch.randn(3, 7, 5, dtype=torch.float64)
    mask = torch.arange(7)[None] < torch.tensor([7, 4, 1])[:, None]
    s0 = 0.1 * torch.randn(3, cell.state_size, dtype=torch.float64)
    for start in (None, s0):
        states, _ = cell.scan(x, mask, start)
        view = cell.linear_view(x, mask)
        assert counted_positions(view, states, mask).sum() > 0
        assert one_step_error(view, states, mask, start).abs().max().item() < 1e-12
        assert accumulated_error(view, states, mask, start).abs().max().item() < 1e-10


def test_gru_error_falls_as_the_weights_shrink():
    torch.manual_seed(0)
    base = GRU(6, 5).double()
    x = torch.randn(4, 12, 6, dtype=torch.float64)
    means = []
    for s in (1.0, 0.3, 0.1, 0.03):
        cell = GRU(6, 5).double()
        with torch.no_grad():
            for p, q in zip(cell.parameters(), base.parameters()):
                p.copy_(q * s)
        states, _ = cell.scan(x)
        err = one_step_error(cell.linear_view(x), states, None)
        means.append(err[:, 1:].mean().item())
    print("mean one-step error by scale 1, .3, .1, .03:", means)
    assert all(a > b for a, b in zip(means, means[1:]))
    assert means[-1] < 0.1 * means[0]


# --- approx_error over batches ------------------------------------------------------------------
def _lm(cell):
    torch.manual_seed(0)
    model = RNNModel(ModelConfig(cell=cell, embedding_dim=6, hidden_size=5), 30, task="lm").eval()
    ids = torch.randint(2, 30, (200,), generator=torch.Generator().manual_seed(0))
    return model, BPTTIterator(ids, 4, 7)


def test_language_model_carries_the_state_across_segments():
    model, it = _lm("mvma-g")
    res = approx_error(model, it)
    assert res["exact"] and res["tokens"] == 4 * 49
    assert res["one_step"]["max"] < 1e-6 and res["accumulated"]["max"] < 1e-5
    model, it = _lm("gru")
    res = approx_error(model, it)
    assert not res["exact"]
    # Segments after the first start from the carried (non-zero) state: t = 1 has an error.
    assert res["one_step"]["by_position"]["1"]["mean"] > 0
    assert res["one_step"]["by_position"]["1"]["tokens"] == 4 * 7
    assert res["one_step"]["by_position"][">10"]["tokens"] == 0


@pytest.mark.parametrize("cell", ["gru", "lstm", "mvm-g"])
def test_language_model_that_starts_every_segment_afresh_is_measured_so(cell):
    # model.carry_state false: each segment starts from zeros, as the model runs it, so the error
    # over the segments is the mean of each segment measured alone.
    torch.manual_seed(0)
    model = RNNModel(ModelConfig(cell=cell, embedding_dim=6, hidden_size=5, carry_state=False), 30,
                     task="lm").double().eval()
    assert not model.carries_state
    segments = list(BPTTIterator(torch.randint(2, 30, (120,), generator=torch.Generator().manual_seed(1)), 3, 8))
    both = approx_error(model, segments)
    alone = [approx_error(model, [b]) for b in segments]
    for key in ("one_step", "accumulated"):
        mean = sum(a[key]["mean"] * a[key]["tokens"] for a in alone) / sum(a[key]["tokens"] for a in alone)
        assert abs(both[key]["mean"] - mean) < 1e-9
    assert both["one_step"]["by_position"]["1"]["mean"] < 1e-9      # a zero start state: exact at t = 1


# --- the command line ---------------------------------------------------------------------------
def _train(out, *extra):
    assert main(["train", "--out", str(out), "--embedding-dim", "8", "--hidden-size", "8",
                 "--epochs", "1", "--quiet", *extra]) == 0


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    root = tmp_path_factory.mktemp("approx")
    _train(root / "gru")
    _train(root / "mvma", "--cell", "mvma-g")
    return root


def test_cli_text(models, capsys):
    capsys.readouterr()
    assert main(["approx-error", "--model", str(models / "gru")]) == 0
    out = capsys.readouterr().out
    print(out)
    assert "gru (first-order linear view) on test" in out
    assert "one-step error (eq. 15)" in out and "accumulated error" in out


def test_cli_json(models, capsys):
    capsys.readouterr()
    assert main(["approx-error", "--model", str(models / "gru"), "--split", "dev", "--json"]) == 0
    res = json.loads(capsys.readouterr().out)
    print(res)
    assert res["split"] == "dev" and res["cell"] == "gru" and res["exact"] is False
    one, acc = res["one_step"], res["accumulated"]
    assert res["tokens"] == one["tokens"] + res["zero_state_tokens"] > 0
    assert 0 < one["mean"] < 2 and 0 <= one["median"] <= one["max"]
    assert one["by_position"]["1"]["mean"] < 1e-6          # zero start state: exact at t = 1
    assert sum(b["tokens"] for b in one["by_position"].values()) == one["tokens"]
    assert acc["diverged"] == 0 and acc["mean"] > 0


def test_cli_exact_cell_prints_zero(models, capsys):
    capsys.readouterr()
    assert main(["approx-error", "--model", str(models / "mvma")]) == 0
    out = capsys.readouterr().out
    assert "mvma-g is an exact affine recurrence: the first-order error is 0" in out
    assert main(["approx-error", "--model", str(models / "mvma"), "--json"]) == 0
    res = json.loads(capsys.readouterr().out)
    assert res["exact"] is True and res["one_step"]["max"] < 1e-6 and res["accumulated"]["max"] < 1e-5


@pytest.mark.parametrize("case", ["missing", "split", "bidirectional"])
def test_cli_bad_input_is_one_line_and_exit_2(case, models, tmp_path, capsys):
    if case == "missing":
        argv = ["approx-error", "--model", str(tmp_path / "nope")]
    elif case == "split":
        argv = ["approx-error", "--model", str(models / "gru"), "--split", "nope"]
    else:
        _train(tmp_path / "bi", "--bidirectional", "true")
        argv = ["approx-error", "--model", str(tmp_path / "bi")]
    capsys.readouterr()
    assert main(argv) == 2
    err = capsys.readouterr().err
    print(err)
    assert err.startswith("rnnlens: error: ") and err.count("\n") == 1


@pytest.mark.parametrize("name", sorted(CELLS))
def test_an_exact_view_predicts_every_state_of_every_cell_from_its_start(name):
    # One step from the true previous state, and from the start: the cell's own start state
    # (the semiring's zero: -inf for a max-plus cell) or a given one; 0 error for an exact view.
    from rnnlens.encoder import build_cell

    torch.manual_seed(0)
    cell = build_cell(ModelConfig(cell=name, hidden_size=4), 5).double().eval()
    x = torch.randn(2, 6, 5, generator=torch.Generator().manual_seed(1), dtype=torch.float64)
    mask = torch.tensor([[1] * 6, [1] * 4 + [0] * 2], dtype=torch.bool)
    view = cell.linear_view(x, mask)
    if not view.exact:
        pytest.skip(f"{name}'s view is first-order")
    states, _ = cell.scan(x, mask)
    assert one_step_error(view, states, mask).abs().max() < 1e-9
    assert accumulated_error(view, states, mask).abs().max() < 1e-9
    s0 = states[:, 2].clone()
    later, _ = cell.scan(x, mask, s0)
    assert one_step_error(cell.linear_view(x, mask, s0), later, mask).abs().max() < 1e-9
    assert one_step_error(view, later, mask, s0).abs().max() < 1e-9
