"""Plain helpers that several test modules share: paths, the command line, the cell contract's
test inputs, an independent first-order unrolling and a tiny training corpus.

Test modules import these from here (`from tests.support import max_diff`), never from each
other; pytest fixtures live in conftest.py. Nothing here is collected as a test."""
import os
from pathlib import Path

import torch
from torch import nn

# --- paths ---------------------------------------------------------------------------------------
REPO = Path(__file__).resolve().parents[1]
FIXTURES = REPO / "tests" / "fixtures"       # small hand-written data files


def shared_data_dir() -> Path:
    """Real datasets: $RNNLENS_DATA, else ../shared/data beside the repository."""
    return Path(os.environ.get("RNNLENS_DATA", REPO.parent / "shared" / "data"))


# --- numbers -------------------------------------------------------------------------------------
def max_diff(a, b) -> float:
    """Largest absolute difference, printed before asserting (DESIGN habit 1)."""
    d = (a - b).abs().max().item() if a.numel() else 0.0
    print(f"max |diff| = {d:.3e}")
    return d


def terms_match(fast, ref, leaves, keep) -> None:
    """A fast path's tuple of terms against its reference: every value within 1e-14, and the
    gradients of `leaves` through the outputs numbered in `keep` (the others get none) under
    one random weighting within 1e-12 (float64 inputs)."""
    import torch

    for u, v in zip(fast, ref):
        assert max_diff(u, v) < 1e-14
    ws = [torch.randn_like(t) for t in ref]

    def loss(outs):
        return sum((outs[j] * ws[j]).sum() for j in keep)

    for u, v in zip(torch.autograd.grad(loss(fast), leaves), torch.autograd.grad(loss(ref), leaves)):
        assert max_diff(u, v) < 1e-12


# --- Triton kernels ------------------------------------------------------------------------------
def triton_kernels_here(kernels):
    """The body of a module fixture for tests of Triton kernels: on a GPU it yields at once;
    without one it sets TRITON_INTERPRET=1 for the module, so that `kernels()` (the module's
    cached kernel builder) builds them for Triton's interpreter, and skips when they were
    already built without it in this process."""
    import pytest

    if torch.cuda.is_available():
        yield
        return
    from triton.runtime.interpreter import InterpretedFunction

    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("TRITON_INTERPRET", "1")
        if not isinstance(kernels()[0], InterpretedFunction):
            pytest.skip("the Triton kernels were already compiled in this process without "
                        "TRITON_INTERPRET=1 and there is no GPU; run this file on its own")
        yield


def rows_mask(B: int, T: int) -> torch.Tensor:
    """[B,T] (B >= 5): row 0 all real, right padding (row 1), left padding (row 2), a hole
    (row 3), nothing real (row 4), the rest all real."""
    m = torch.ones(B, T, dtype=torch.bool)
    m[1, T - 3:] = False
    m[2, :2] = False
    m[3, T // 2] = False
    m[4] = False
    return m


# --- the command line ----------------------------------------------------------------------------
TINY = ["--embedding-dim", "8", "--hidden-size", "8", "--epochs", "1", "--quiet"]


def run_cli(capsys, *argv):
    """rnnlens.cli.main's exit code (argparse's SystemExit included), stdout, stderr."""
    from rnnlens.cli import main

    try:
        code = main([str(a) for a in argv])
    except SystemExit as e:
        code = e.code
    out, err = capsys.readouterr()
    return code, out, err


def assert_clean_error(code, err, *needles):
    assert code == 2
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert len(lines) == 1, err
    assert "Traceback" not in err
    for n in needles:
        assert n in lines[0], lines[0]


# `rnnlens` in a process that SIGKILLs itself at its KILL_AT-th training step (under torchrun:
# every rank at the same step), so where a run dies does not depend on timing. Run it as a
# script file or with `python -c KILLER ARGS...`.
KILLER = """
import os, signal, sys
from rnnlens.models import RNNModel
from rnnlens.cli import main
at, calls, loss = int(os.environ["KILL_AT"]), [0], RNNModel.loss
def killing_loss(self, out, batch):
    if self.training:
        calls[0] += 1
        if calls[0] == at:
            os.kill(os.getpid(), getattr(signal, os.environ.get("KILL_SIGNAL", "SIGKILL")))
    return loss(self, out, batch)
RNNModel.loss = killing_loss
sys.exit(main(sys.argv[1:]))
"""


# --- models --------------------------------------------------------------------------------------
def copy_torch_weights(model, user) -> None:
    """Give an rnnlens RNNModel the weights of a plain module with .emb (nn.Embedding), .rnn (a
    one-direction torch RNN/GRU/LSTM, any num_layers) and .out (nn.Linear): its torch twin in
    the tests."""
    with torch.no_grad():
        model.embedding.weight.copy_(user.emb.weight)
        for k, cell in enumerate(model.encoder.cells):
            for name in ("weight_ih", "weight_hh", "bias_ih", "bias_hh"):
                getattr(cell, name).copy_(getattr(user.rnn, f"{name}_l{k}"))
        model.head.out.weight.copy_(user.out.weight)
        model.head.out.bias.copy_(user.out.bias)


# --- the cell contract's inputs ------------------------------------------------------------------
E, H = 5, 4


def make(name, dtype=torch.float64):
    from rnnlens.cells import CELLS

    torch.manual_seed(1)
    cell = CELLS[name](E, H).to(dtype)
    with torch.no_grad():  # biases away from torch's small default so they matter
        for n, p in cell.named_parameters():
            if "bias" in n:
                p.uniform_(-1, 1)
    return cell


def padded_batch(dtype=torch.float64):
    lengths = torch.tensor([6, 3, 1, 5])
    x = torch.randn(4, 6, E, dtype=dtype)
    mask = torch.arange(6)[None] < lengths[:, None]
    return x, mask, lengths


# --- an independent first-order view (torch's own cells and autograd, no rnnlens code) -----------
def torch_step(kind: str, cell):
    """step(x[E], s[S]) -> s'[S] of one GRU/LSTM layer in float64, run by torch.nn.GRUCell /
    LSTMCell with `cell`'s weights (anything holding weight_ih, weight_hh, bias_ih, bias_hh
    in torch's layout, or a torch.nn.GRU/LSTM's layer 0). The LSTM's state is [c; h]."""
    def param(name):
        return getattr(cell, name) if hasattr(cell, name) else getattr(cell, name + "_l0")

    W_ih = param("weight_ih")
    H = param("weight_hh").shape[1]
    E = W_ih.shape[1]
    tc = (nn.GRUCell if kind == "gru" else nn.LSTMCell)(E, H).double()
    with torch.no_grad():
        for name in ("weight_ih", "weight_hh", "bias_ih", "bias_hh"):
            getattr(tc, name).copy_(param(name).detach().double())
    if kind == "gru":
        return lambda x, s: tc(x[None], s[None])[0]

    def lstm(x, s):
        h, c = tc(x[None], (s[None, H:], s[None, :H]))
        return torch.cat([c[0], h[0]])
    return lstm


def first_order_ngrams(step, xs: torch.Tensor, S: int) -> torch.Tensor:
    """v[t, i] = A(x_t) ... A(x_{i+1}) g(x_i) for xs [T,E] (float64), with g(x) = step(x, 0)
    and A(x) = d step(x, s) / ds at s = 0 (autograd's Jacobian): [T(end), T(start), S],
    zero for i > t. The unrolling of DESIGN.md's first-order view, written out directly."""
    T = xs.shape[0]
    zero = xs.new_zeros(S)
    g = [step(x, zero).detach() for x in xs]
    A = [torch.autograd.functional.jacobian(lambda s, x=x: step(x, s), zero) for x in xs]
    v = xs.new_zeros(T, T, S)
    for t in range(T):
        for i in range(t + 1):
            vec = g[i]
            for k in range(i + 1, t + 1):
                vec = A[k] @ vec
            v[t, i] = vec
    return v


# --- a tiny language-model corpus ----------------------------------------------------------------
CORPUS_WORDS = {"nouns": ["dog", "cat", "man", "woman", "bird"], "verbs": ["sees", "likes", "chases", "hears"],
                "adj": ["big", "small", "red", "old"]}


def write_tiny_corpus(root):
    """A ptb/ folder of short generated sentences: the shape rnnlens' PTB loader reads."""
    import random

    rng = random.Random(0)
    w = CORPUS_WORDS

    def sent():
        return " ".join(["the", *rng.sample(w["adj"], rng.randint(0, 3)), rng.choice(w["nouns"]),
                         rng.choice(w["verbs"]), "the", rng.choice(w["nouns"])])

    (root / "ptb").mkdir(parents=True)
    for name, k in (("train", 200), ("valid", 20), ("test", 20)):
        (root / "ptb" / f"ptb.{name}.txt").write_text("\n".join(sent() for _ in range(k)) + "\n")
    return root


def train_tiny(root, out, *extra):
    from rnnlens.cli import main

    args = ["train", "--corpus", "ptb", "--data-dir", str(root), "--sentence-level", "true", "--cell", "lstm",
            "--embedding-dim", "8", "--hidden-size", "8", "--epochs", "1", "--quiet", "--out", str(out), *extra]
    assert main(args) == 0
    return out


UNTRAINED_WORDS = ["the", "film", "was", "good", "bad", "not", "very", "<eos>"]


def untrained_checkpoint(path, task="classify", labels=("negative", "positive"), data=None, words=UNTRAINED_WORDS,
                         **model) -> Path:
    """A checkpoint of an untrained model (embedding and hidden 4 unless **model says
    otherwise) over `words`: enough for the commands' input checks, no training time."""
    from rnnlens.data.vocab import Vocab
    from rnnlens.models import RNNModel
    from rnnlens.train.checkpoint import save_checkpoint
    from rnnlens.config import Config

    cfg = Config.from_dict({"data": data or {}, "model": {"embedding_dim": 4, "hidden_size": 4, **model}})
    vocab = Vocab(words)
    labels = None if labels is None else list(labels)
    path.mkdir(parents=True)
    save_checkpoint(path, RNNModel(cfg.model, len(vocab), task, labels, sentence_level=cfg.data.sentence_level),
                    cfg, vocab, labels, task)
    return path
