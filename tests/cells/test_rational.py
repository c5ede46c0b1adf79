"""Rational cells: exact views in their semiring, the paper's equations, hand-set fixtures."""
import pytest
import torch

from tests.support import E, H, make, max_diff, padded_batch
from rnnlens.analysis.ngrams import ngram_vectors
from rnnlens.cells import CELLS
from rnnlens.cells.rational import RRNNB, RRNNC, NGramRational

RATIONAL = [n for n in CELLS if n.startswith("rrnn")]


@pytest.mark.parametrize("name", RATIONAL)
def test_view_unrolls_to_the_states_exactly(name):
    """In every semiring: the view's recurrence from the cell's start state rebuilds the
    cell's states, and the n-grams ending at t (+)-sum to the state (max-plus: the max)."""
    cell = make(name)
    x, mask, _ = padded_batch()
    states, _ = cell.scan(x, mask)
    view = cell.linear_view(x, mask)
    assert view.exact
    sr = view.sr
    un = view.unroll()
    print(name, "max |unroll - states| =", max_diff(un[mask], states[mask]))
    assert max_diff(un[mask], states[mask]) < 1e-12
    vec = ngram_vectors(view)                                   # [B,T(end),T(start),S]
    valid = torch.ones(6, 6, dtype=torch.bool).tril()[None] & mask[:, :, None] & mask[:, None, :]
    filled = torch.where(valid[..., None], vec, torch.full_like(vec, sr.zero))
    total = sr.sum(filled, 2)
    assert max_diff(total[mask], states[mask]) < 1e-12


def test_rrnn_b_is_eq_23_by_hand():
    """One dimension, hand-set weights: f = s(w_f x + b_f), u = (1 - f) w_u x."""
    cell = RRNNB(1, 1).double()
    with torch.no_grad():
        cell.weight.copy_(torch.tensor([[2.0], [1.0]]))          # rows: u, f
        cell.bias.copy_(torch.tensor([5.0, -1.0]))               # the u bias is masked out
    x = torch.tensor([[[1.0], [-1.0], [0.5]]], dtype=torch.float64)
    c, want = 0.0, []
    for v in (1.0, -1.0, 0.5):
        f = 1 / (1 + torch.exp(torch.tensor(-(v - 1.0), dtype=torch.float64)))
        c = f * c + (1 - f) * 2.0 * v
        want.append(float(c))
    states, _ = cell.scan(x)
    assert max_diff(states[0, :, 0], torch.tensor(want, dtype=torch.float64)) < 1e-12
    out, _ = cell(x)
    assert max_diff(out[0, :, 0], torch.tanh(torch.tensor(want, dtype=torch.float64))) < 1e-12


def test_max_plus_b_is_the_best_unigram_path():
    """RRNN(B) in max-plus: c_t = max_i (u_i + sum_{k=i+1..t} f_k), eq. 24: the best
    single-token pattern, decayed by the log-gates after it."""
    torch.manual_seed(0)
    cell = RRNNB(3, 2, semiring="max-plus").double()
    x = torch.randn(2, 5, 3, dtype=torch.float64)
    u, f, _ = cell.gates(x)
    u, f = u[0], f[0]
    states, _ = cell.scan(x)
    for t in range(5):
        cands = torch.stack([u[:, i] + f[:, i + 1: t + 1].sum(1) for i in range(t + 1)], 0)
        assert max_diff(states[:, t], cands.max(0).values) < 1e-12


def test_rrnn_f_equations_26():
    torch.manual_seed(1)
    cell = make("rrnn-f-gated")
    x = torch.randn(2, 4, E, dtype=torch.float64)
    u, f, o = cell.gates(x)
    p = torch.sigmoid(cell.bias_p)
    r = torch.sigmoid(cell.bias_r)
    c1 = torch.zeros(2, H, dtype=torch.float64)
    c2 = torch.zeros(2, H, dtype=torch.float64)
    out, _ = cell(x, state=torch.zeros(2, cell.state_size, dtype=torch.float64))
    for t in range(4):
        c1, c2 = c1 * f[0][:, t] + u[0][:, t], c2 * f[1][:, t] + (c1 + r) * u[1][:, t]
        c = p[:H] * c1 + p[H:] * c2
        assert max_diff(out[:, t], torch.tanh(o[:, t] * c)) < 1e-12


def test_ngram_cell_generalises_c():
    torch.manual_seed(2)
    c = RRNNC(E, H).double()
    g = NGramRational(E, H, n=2).double()
    g.load_state_dict(c.state_dict())
    x = torch.randn(2, 5, E, dtype=torch.float64)
    assert max_diff(c(x)[0], g(x)[0]) == 0
    tri = NGramRational(E, H, n=3).double()
    assert tri.state_size == 3 * H and tri(x)[0].shape == (2, 5, H)


def test_shared_parameters_get_the_batch_sum():
    """The epsilon weight r of RRNN(F) is shared by every row: its gradient is the sum of
    the rows' gradients (the authors' kernel overwrote it, NOTES.md)."""
    torch.manual_seed(3)
    cell = make("rrnn-f")
    x = torch.randn(3, 4, E, dtype=torch.float64)
    cell(x)[0].sum().backward()
    total = cell.bias_r.grad.clone()
    parts = torch.zeros_like(total)
    for b in range(3):
        cell.zero_grad()
        cell(x[b: b + 1])[0].sum().backward()
        parts += cell.bias_r.grad
    assert max_diff(total, parts) < 1e-12


@pytest.mark.parametrize("name", RATIONAL + ["rrnn-3gram-maxplus"])
def test_compiled_wfsa_scores_equal_the_cell_state(name):
    """Proposition 7 (and its analogues for C, F and the n-gram cell): for every hidden
    dimension, the compiled WFSA's Forward score of each prefix equals the cell's state."""
    from rnnlens.analysis.wfsa import compile_wfsa
    from rnnlens.cells.rational import NGramRational

    torch.manual_seed(4)
    cell = NGramRational(E, H, n=3, semiring="max-plus").double() if name == "rrnn-3gram-maxplus" else make(name)
    emb = torch.nn.Embedding(7, E).double()
    for trial in range(3):
        ids = torch.randint(0, 7, (5,))
        states, _ = cell.scan(emb(ids)[None])
        c = states[0, :, (cell.blocks - 1) * H:]
        for d in range(H):
            wfsa = compile_wfsa(cell, d, emb)
            got = wfsa.forward_prefixes(ids.tolist())
            # (max-plus: a state no path has reached yet is -inf on both sides)
            torch.testing.assert_close(got, c[:, d].detach(), atol=1e-10, rtol=0)
        every = compile_wfsa(cell, None, emb).forward_prefixes(ids.tolist())      # all H at once
        torch.testing.assert_close(every, c.detach(), atol=1e-10, rtol=0)


def test_max_plus_viterbi_names_the_winning_ngram():
    from rnnlens.analysis.wfsa import compile_wfsa
    from rnnlens.analysis.wfsa_core import path_ngram

    torch.manual_seed(5)
    cell = make("rrnn-b-maxplus")
    emb = torch.nn.Embedding(5, E).double()
    ids = [3, 1, 4, 1, 2]
    states, _ = cell.scan(emb(torch.tensor(ids))[None])
    u, f, _ = cell.gates(emb(torch.tensor(ids))[None])
    for d in range(H):
        score, path = compile_wfsa(cell, d, emb).viterbi(ids)
        assert abs(float(score) - float(states[0, -1, d])) < 1e-10
        (pos, sym), = path_ngram(path)
        best = max(range(5), key=lambda i: float(u[0][0, i, d] + f[0][0, i + 1:, d].sum()))
        assert (pos, sym) == (best, ids[best])


def test_wfsa_command(tmp_path, capsys):
    from rnnlens.cli import main

    out = tmp_path / "m"
    assert main(["train", "--out", str(out), "--cell", "rrnn-c", "--embedding-dim", "6", "--hidden-size", "4",
                 "--epochs", "1", "--quiet"]) == 0
    capsys.readouterr()
    dot = tmp_path / "a.dot"
    assert main(["wfsa", "--model", str(out), "--dim", "2", "--text", "not good", "--dot", str(dot)]) == 0
    text = capsys.readouterr().out
    import re
    score, state = map(float, re.search(r"score ([-+.\d]+); the model's state c = ([-+.\d]+)", text).groups())
    assert abs(score - state) < 1e-5
    assert dot.read_text().startswith("digraph WFSA") and "doublecircle" in dot.read_text()
    assert main(["wfsa", "--model", str(out), "--dim", "0", "--text", "good zzqx", "--force", "--dot", str(dot)]) == 0
    assert "read as <unk>: zzqx" in capsys.readouterr().err                   # as explain warns
    bi = tmp_path / "bi"
    assert main(["train", "--out", str(bi), "--cell", "rrnn-b", "--bidirectional", "true", "--layers", "2",
                 "--embedding-dim", "4", "--hidden-size", "4", "--epochs", "1", "--quiet"]) == 0
    capsys.readouterr()
    assert main(["wfsa", "--model", str(bi), "--dim", "0", "--text", "good"]) == 0
    assert "also reads its backward direction and the layers above" in capsys.readouterr().err
    for argv, needle in ((["--dim", "9"], "out of range"), (["--dim", "0", "--text", " "], "empty")):
        args = ["wfsa", "--model", str(out), "--text", "good", *argv]
        assert main(args) == 2
        assert needle in capsys.readouterr().err
    gru = tmp_path / "g"
    assert main(["train", "--out", str(gru), "--embedding-dim", "4", "--hidden-size", "4", "--epochs", "1",
                 "--quiet"]) == 0
    assert main(["wfsa", "--model", str(gru), "--dim", "0", "--text", "good"]) == 2
    assert "rational" in capsys.readouterr().err
