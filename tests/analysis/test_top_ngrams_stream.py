"""The streamed top-k n-grams (analysis.ngrams.TopNgrams): a sequence fed as the linear
views of consecutive chunks gives exactly top_ngrams over the view of the whole sequence, for
every real-semiring cell of the registry; and `rnnlens explain --file` reads a document a
chunk at a time with the same result as in one piece."""
import json

import pytest
import torch

from rnnlens.analysis.ngrams import TopNgrams, ngram_scores, top_ngrams
from rnnlens.cells import CELLS
from rnnlens.errors import RnnlensError

E, H = 5, 4
REAL = [n for n in CELLS if "maxplus" not in n]


def make(name):
    torch.manual_seed(1)
    cell = CELLS[name](E, H).double().eval()
    with torch.no_grad():
        for n, p in cell.named_parameters():
            if "bias" in n:
                p.uniform_(-1, 1)
    return cell


def streamed(cell, x, mask, w, L, k, max_n, overlap=1):
    """TopNgrams over views of chunks of L positions, each starting `overlap` positions early
    (as `rnnlens explain --file` reads a document)."""
    top = TopNgrams(w, k, max_n)
    for a in range(0, x.shape[1], L):
        lo = max(0, a - overlap)
        top.add(cell.linear_view(x[:, lo: a + L], None if mask is None else mask[:, lo: a + L]), offset=lo)
    return top.result()


def assert_same(got, want, tol=1e-10):
    print("streamed", got[:3], "\nwhole   ", want[:3])
    assert [(i, t) for _, i, t in got] == [(i, t) for _, i, t in want]
    # relative: some cells' long n-grams grow large (LSTM-variant's reach 1e10 here)
    assert max(abs(a[0] - b[0]) / (1 + abs(b[0])) for a, b in zip(got, want)) < tol


@pytest.mark.parametrize("name", REAL)
def test_streamed_chunks_equal_the_whole_view(name):
    cell = make(name)
    torch.manual_seed(2)
    x = torch.randn(1, 61, E, dtype=torch.float64)
    w = torch.randn(H, dtype=torch.float64)
    with torch.no_grad():
        view = cell.linear_view(x)
        for max_n in (3, None):
            want = top_ngrams(view, w, k=12, max_n=max_n)
            assert len(want) == 12
            for L in (1, 7, 16, 61):
                assert_same(streamed(cell, x, None, w, L, 12, max_n), want)


@pytest.mark.parametrize("name", ["gru", "lstm", "mvma-g", "rrnn-b"])
def test_streamed_chunks_with_pads_and_against_brute_force(name):
    """Pads inside the chunks (and a chunk of pads only) change nothing; the top-k is the
    brute-force one over all n-grams of at most max_n real tokens."""
    cell = make(name)
    torch.manual_seed(3)
    x = torch.randn(1, 40, E, dtype=torch.float64)
    mask = torch.rand(1, 40) > 0.3
    mask[:, 10:18] = False
    w = torch.randn(H, dtype=torch.float64)
    with torch.no_grad():
        view = cell.linear_view(x, mask)
        want = top_ngrams(view, w, k=10, max_n=4)
        s = ngram_scores(view, w)[0, :, :, 0]
        real = mask[0].nonzero()[:, 0].tolist()
        cand = [(float(s[t, i]), i, t) for a, t in enumerate(real) for i in real[max(0, a - 3): a + 1]]
        assert_same(want, sorted(cand, key=lambda c: -abs(c[0]))[:10], 1e-12)
        for L in (5, 8, 13):
            assert_same(streamed(cell, x, mask, w, L, 10, 4, overlap=0), want)


def test_mvm_needs_the_overlap():
    """MVM's only n-gram starts at a call's first token: a chunk read on its own would start
    new ones, so a chunk begins at the last token already read (`rnnlens explain` does)."""
    cell = make("mvm-g")
    x = torch.randn(1, 30, E, dtype=torch.float64)
    w = torch.randn(H, dtype=torch.float64)
    with torch.no_grad():
        want = top_ngrams(cell.linear_view(x), w, k=5, max_n=None)
        assert {i for _, i, _ in want} == {0}
        assert_same(streamed(cell, x, None, w, 7, 5, None, overlap=1), want)
        cut = streamed(cell, x, None, w, 7, 5, None, overlap=0)
        assert {i for _, i, _ in cut} != {0}


def test_chunks_must_follow_one_another():
    cell = make("gru")
    x = torch.randn(1, 20, E, dtype=torch.float64)
    top = TopNgrams(torch.randn(H, dtype=torch.float64), 3, 2)
    with torch.no_grad():
        top.add(cell.linear_view(x[:, :8]))
        with pytest.raises(RnnlensError, match="never given"):
            top.add(cell.linear_view(x[:, 10:]), offset=10)
        top.add(cell.linear_view(x[:, 5:]), offset=5)            # an overlap is read once
        assert top.next == 20
        assert_same(top.result(), top_ngrams(cell.linear_view(x), top.w, 3, 2))


def test_ties_do_not_depend_on_the_chunks():
    """Equal scores (a repeated token's unigram) come out earliest first, however cut."""
    view_cell = make("mvma-g")
    tok = torch.randn(3, E, dtype=torch.float64)
    x = tok[torch.arange(30) % 3][None]
    w = torch.randn(H, dtype=torch.float64)
    with torch.no_grad():
        want = top_ngrams(view_cell.linear_view(x), w, k=8, max_n=1)
        ends = [t for _, _, t in want]
        assert ends == sorted(ends) and len({s for s, _, _ in want}) == 1
        for L in (4, 7):
            assert streamed(view_cell, x, None, w, L, 8, 1, overlap=0) == want


# --- the command line --------------------------------------------------------------------------
@pytest.fixture(scope="module")
def model_dirs(tmp_path_factory):
    """Randomly initialised one-layer models saved as checkpoints: a GRU, MVM-G (needs the
    overlap), an LSTM, and a memory network (refused: its head reads the block)."""
    from rnnlens.data.vocab import Vocab
    from rnnlens.models import RNNModel
    from rnnlens.train.checkpoint import save_checkpoint
    from rnnlens.config import Config

    vocab = Vocab(f"w{i}" for i in range(20))
    out = {}
    for name, model in [("gru", {"cell": "gru"}), ("mvm-g", {"cell": "mvm-g"}), ("lstm", {"cell": "lstm"}),
                        ("memory", {"cell": "lstm", "memory": "rm"})]:
        d = {"model": {**model, "embedding_dim": 8, "hidden_size": 8}}
        if "memory" in model:
            d["data"] = {"sentence_level": True}
        cfg = Config.from_dict(d)
        torch.manual_seed(0)
        path = tmp_path_factory.mktemp(name)
        save_checkpoint(path, RNNModel(cfg.model, len(vocab), "classify", ["neg", "pos"]), cfg, vocab, ["neg", "pos"])
        out[name] = path
    return out


def test_explain_file_refuses_a_memory_network(model_dirs, tmp_path, capsys):
    from rnnlens import cli

    doc = tmp_path / "doc.txt"
    doc.write_text("w1 w2 w3 " * 200)
    assert cli.main(["explain", "--model", str(model_dirs["memory"]), "--file", str(doc)]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and "memory block" in err


@pytest.mark.parametrize("name", ["gru", "mvm-g", "lstm"])
def test_explain_file_in_chunks_equals_one_piece(model_dirs, name, tmp_path, capsys, monkeypatch):
    from rnnlens import cli

    g = torch.Generator().manual_seed(5)
    words = [f"w{int(i)}" for i in torch.randint(0, 20, (300,), generator=g)]
    doc = tmp_path / "doc.txt"
    doc.write_text(" ".join(words))
    argv = ["explain", "--model", str(model_dirs[name]), "--file", str(doc), "--top", "7", "--max-n", "3", "--json"]
    results = []
    for L in (10 ** 6, 64, 17):
        monkeypatch.setattr(cli.explain, "DOCUMENT_CHUNK", L)
        assert cli.main(argv) == 0
        out, err = capsys.readouterr()
        results.append(json.loads(out))
        assert ("explain" in err) == (L < 300)                   # a progress bar for long documents
    one, *chunked = results
    assert one["tokens"] == 300 and len(one["ngrams"]) == 7
    for got in chunked:
        assert [(r["start"], r["end"], r["text"]) for r in got["ngrams"]] == \
            [(r["start"], r["end"], r["text"]) for r in one["ngrams"]]
        assert max(abs(a["score"] - b["score"]) for a, b in zip(got["ngrams"], one["ngrams"])) < 1e-5
