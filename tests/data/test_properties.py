"""Property-based tests (hypothesis): the tokenizer, every reader on
generated files, the n-gram decomposition (parts add up, nothing NaN for finite input), and
a fuzz of `rnnlens explain` on random unicode text. Example counts are kept small so the
file runs in well under a minute on one core."""
import json
import math
import tempfile
from pathlib import Path

import pytest
import torch

from rnnlens.cli import main
from rnnlens.data.tokenize import Tokenizer, clean_text
from rnnlens.data.vocab import Vocab
from rnnlens.errors import RnnlensError
from tests.support import FIXTURES as FIX

hypothesis = pytest.importorskip("hypothesis")
from hypothesis import HealthCheck, example, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

FEW = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
SOME = settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])

# Any text: every plane, combining marks, odd whitespace (U+0085, U+2028), controls, and
# lone surrogates (what a byte of argv that is not UTF-8 becomes).
ANY_CHAR = st.characters(codec=None, categories=None)
TEXT = st.text(ANY_CHAR, max_size=60)


# --- the tokenizer ----------------------------------------------------------------------------

@FEW
@given(TEXT, st.booleans(), st.booleans())
def test_tokenizer_never_fails_and_gives_nonempty_tokens_without_whitespace(text, lowercase, split_punct):
    toks = Tokenizer(lowercase=lowercase, split_punct=split_punct)(text)
    assert all(isinstance(t, str) and t and not any(c.isspace() for c in t) for t in toks)


@FEW
@given(TEXT, st.booleans())
def test_tokenizer_keeps_every_character_but_whitespace(text, lowercase):
    """The documented round trip: tokens are a partition of the (lowercased) text's
    non-whitespace characters, in order, a lone surrogate read as U+FFFD (clean_text); without
    split_punct they are str.split()'s."""
    low = clean_text(text.lower() if lowercase else text)
    assert "".join(Tokenizer(lowercase=lowercase)(text)) == "".join(c for c in low if not c.isspace())
    assert Tokenizer(lowercase=lowercase, split_punct=False)(text) == low.split()


@FEW
@given(TEXT, st.booleans(), st.booleans())
def test_tokenizer_is_idempotent(text, lowercase, split_punct):
    """Tokenising the tokens joined by spaces gives the same tokens."""
    tok = Tokenizer(lowercase=lowercase, split_punct=split_punct)
    toks = tok(text)
    assert tok(" ".join(toks)) == toks


@FEW
@given(st.lists(st.text(ANY_CHAR, min_size=1, max_size=8), max_size=20), st.lists(TEXT, max_size=5))
def test_vocab_round_trips_through_json(words, other):
    vocab = Vocab.build([words])
    again = Vocab.from_dict(json.loads(json.dumps(vocab.to_dict(), ensure_ascii=False).encode(
        "utf-8", "surrogatepass").decode("utf-8", "surrogatepass")))
    assert again.itos == vocab.itos
    for w in words + other:
        ids = vocab.encode([w])
        assert vocab.decode(ids) == ([w] if w in vocab else ["<unk>"])


# --- readers on generated files: parsed, or an RnnlensError; never anything else --------------

def _readers():
    from rnnlens.analysis.breakdown import read_metrics
    from rnnlens.data import msr
    from rnnlens.data import agreement as AGR
    from rnnlens.data import readers as R
    from rnnlens.data import semeval_conll as SC
    from rnnlens.data.conllu import read_conllu
    from rnnlens.data.vectors import load_vectors
    from rnnlens.config import load_config_file

    vocab = Vocab(["a", "b", "the", "x"])
    return {
        "labelled_tsv": lambda p: R.read_labelled_tsv(p, Tokenizer()),
        "sst": R.read_sst_trees, "sst_phrases": lambda p: R.read_sst_trees(p, phrases=True),
        "glue": R.read_glue_sst2, "label_first": lambda p: R.read_label_first(p, labels=("0", "1")),
        "trec": R.read_trec, "ag_news": R.read_ag_news, "imdb": R.read_imdb,
        "semeval": SC.read_semeval, "semeval_key": SC._read_semeval_key,
        "conll": SC.read_conll2003, "lm": R.read_lm_text, "linzen": AGR.read_linzen_tsv,
        "agreement_testset": AGR.read_agreement_testset, "conllu": read_conllu,
        "msr_questions": msr.read_msr_questions, "msr_answers": msr.read_msr_answers,
        "vectors": lambda p: load_vectors(p, vocab, 3), "config": load_config_file, "metrics": read_metrics,
        "vocab": Vocab.load,
    }


READERS = _readers()

# Pieces of every format, so generated lines come near the valid ones (a bare random string
# is rejected at the first character and explores little).
PIECES = ["\t", " ", ",", '"', "(", ")", "0", "1", "2", "4", "9", "-1", "a", "the", "B-PER", "I-ORG", "O",
          "HUM:ind", "<e1>", "</e1>", "<e2>", "</e2>", "Other", "Comment:", "_____", "a)", "[w]", "1a)",
          "#", "-DOCSTART-", "VBZ", "VBP", "sentence", "label", "verb_pos", "verb_index", '{"text": "x", "label": 1}',
          "{", "}", "[", "]", "[" * 5000, ":", "nan", "1e999", "\u00a0", "\u0085", "\u2028", "\r", "é", "\x00", "\ufeff"]
LINE = st.lists(st.one_of(st.sampled_from(PIECES), st.text(ANY_CHAR, max_size=4)), max_size=12).map("".join)
RANDOM_CONTENT = st.one_of(
    st.lists(LINE, max_size=8).map(lambda ls: "\n".join(ls).encode("utf-8", "surrogatepass")),
    st.binary(max_size=80),
)
AGREEMENT_TEXT = "the keys to the cabinet are here\nthe key is here\n"
# A valid file of each format, which the generator then breaks a little (so that the
# readers get past their first check and their later ones are exercised too).
SAMPLES = {
    "labelled_tsv": "pos\ta fine film\nneg\ta dull one\n", "sst": (FIX / "sst_trees.txt").read_text(),
    "glue": (FIX / "glue_sst2.tsv").read_text(), "label_first": "1 a good film\n0 a bad one\n",
    "trec": "DESC:manner How did it go ?\nLOC:city Where is it ?\n", "ag_news": (FIX / "ag_news.csv").read_text(),
    "imdb": (FIX / "imdb.jsonl").read_text(), "semeval": (FIX / "semeval.txt").read_text(),
    "semeval_key": (FIX / "semeval_key.txt").read_text(), "conll": (FIX / "conll.txt").read_text(),
    "lm": (FIX / "lm.txt").read_text(), "linzen": (FIX / "agr_sample.tsv").read_text(),
    "agreement_testset": "6\tare\tis\t1\n3\tis\tare\t0\n", "conllu": (FIX / "deps.conllu").read_text(),
    "msr_questions": (FIX / "msr_questions.csv").read_text(), "msr_answers": (FIX / "msr_answers.csv").read_text(),
    "vectors": "a 1 2 3\nthe 0.5 -1 2e3\n", "config": '{"model": {"cell": "gru", "hidden_size": 4}, "train": {}}',
    "metrics": '{"epoch": 1, "dev_loss": 0.5}\n{"split": "test", "loss": 0.4}\n',
    "vocab": '{"format": "rnnlens-vocab", "version": 1, "itos": ["<pad>", "<unk>", "a"]}',
}
SAMPLES["sst_phrases"] = SAMPLES["sst"]
PIECE = st.one_of(st.sampled_from(PIECES + ["\n", "\n\n", "\t\t"]), st.text(ANY_CHAR, max_size=3))


def _mutate(sample: str, ops) -> bytes:
    s = sample
    for pos, length, op, piece in ops:
        pos = pos % (len(s) + 1)
        if op == "delete":
            s = s[:pos] + s[pos + length:]
        elif op == "insert":
            s = s[:pos] + piece + s[pos:]
        elif op == "replace":
            s = s[:pos] + piece + s[pos + max(1, len(piece)):]
        elif op == "cut":
            s = s[:pos]
        else:                                      # repeat a line
            lines = s.split("\n")
            i = pos % len(lines)
            s = "\n".join(lines[:i + 1] + lines[i:])
    return s.encode("utf-8", "surrogatepass")


def content_for(name: str):
    ops = st.lists(st.tuples(st.integers(0, 10_000), st.integers(1, 8),
                             st.sampled_from(["delete", "insert", "replace", "cut", "repeat"]), PIECE), max_size=4)
    return st.one_of(ops.map(lambda o: _mutate(SAMPLES[name], o)), RANDOM_CONTENT)


@pytest.mark.parametrize("name", sorted(READERS))
@SOME
@given(data=st.data())
def test_reader_parses_or_says_what_is_wrong(name, data):
    content = data.draw(content_for(name))
    with tempfile.TemporaryDirectory() as d:
        p = Path(d) / "data.txt"
        p.write_bytes(content)
        (Path(d) / "data.text").write_text(AGREEMENT_TEXT)     # the agreement test set: text + gold
        (Path(d) / "data.gold").write_bytes(content)
        try:
            READERS[name](p)
        except RnnlensError as e:
            msg = str(e)
            assert msg and "\n" not in msg, msg


# --- the n-gram decomposition: parts add up, nothing NaN for finite input ---------------------

def _real_cells():
    from rnnlens.cells import CELLS
    return sorted(n for n in CELLS if "maxplus" not in n)   # max-plus views are checked in test_rational.py


@SOME
@given(name=st.sampled_from(_real_cells()), seed=st.integers(0, 2**16), B=st.integers(1, 3), T=st.integers(1, 6),
       scale=st.sampled_from([0.0, 1e-3, 0.5, 1.0, 4.0, 30.0]), bias=st.floats(-3, 3),
       lengths=st.lists(st.integers(1, 6), min_size=3, max_size=3))
def test_decomposition_adds_up_and_is_finite(name, seed, B, T, scale, bias, lengths):
    from rnnlens.analysis.ngrams import explain, initial_part, ngram_vectors
    from rnnlens.cells import CELLS

    torch.manual_seed(seed)
    E, H = 3, 4
    cell = CELLS[name](E, H).double()
    with torch.no_grad():
        for n, p in cell.named_parameters():
            if "bias" in n:
                p.fill_(bias)
    x = torch.randn(B, T, E, dtype=torch.float64) * scale
    mask = torch.arange(T)[None] < torch.tensor([min(n, T) for n in lengths[:B]])[:, None]
    with torch.no_grad():
        states, _ = cell.scan(x, mask)
        view = cell.linear_view(x, mask)
        vec = ngram_vectors(view)
        init = initial_part(view)
        w = torch.randn(2, H, dtype=torch.float64)
        ex = explain(view, w, states)
    for t in (states, vec, ex.scores, ex.context, ex.remainder):
        assert torch.isfinite(t).all(), name
    parts = vec.sum(2) + (0 if init is None else init)
    unrolled = view.unroll()
    tol = 1e-9 * (1 + unrolled.abs().max().item())
    assert (parts - unrolled)[mask].abs().max().item() <= tol                   # the n-grams add up to the view
    model = ex.model
    assert ((ex.context + ex.remainder) - model).abs().max().item() <= 1e-9 * (1 + model.abs().max().item())
    if view.exact:                                                              # ... which is the model itself
        h = states[..., view.readout]
        assert (h - unrolled[..., view.readout])[mask].abs().max().item() <= 1e-8 * (1 + h.abs().max().item())


# --- a fuzz of `rnnlens explain` on random unicode text ----------------------------------------

@pytest.fixture(scope="module")
def tiny_model(tmp_path_factory):
    out = tmp_path_factory.mktemp("fuzz") / "model"
    assert main(["train", "--out", str(out), "--epochs", "1", "--hidden-size", "8", "--embedding-dim", "8",
                 "--quiet"]) == 0
    return out


@settings(max_examples=30, deadline=None,             # capsys is read out after every example
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(text=st.one_of(TEXT, st.lists(st.sampled_from(["not", "good", "bad", "very", "the", "film", "!", "\u0085",
                                                      "\ud800", "é", "don't"]) | TEXT, max_size=12).map(" ".join)))
@example(text="--").via("a failure once found")
@example(text="-:").via("a failure once found")
def test_explain_fuzz(tiny_model, capsys, text):
    capsys.readouterr()
    # "--" before the text, as a user gives any text that may start with "-" (argparse would
    # read "-:" as an option and "--" as the separator)
    code = main(["explain", "--model", str(tiny_model), "--json", "--", text])
    out, err = capsys.readouterr()
    assert "Traceback" not in err
    if code == 2:                                  # only an empty text is refused
        assert err.strip().splitlines() == ["rnnlens: error: the text is empty: nothing to explain"]
        assert not Tokenizer()(text)
        return
    assert code == 0, err
    d = json.loads(out)
    assert d["tokens"] == Tokenizer()(text)
    (o,) = d["outputs"]
    assert all(math.isfinite(o[k]) for k in ("output", "offset", "ngram_total", "remainder"))
    assert abs(o["output"] - o["offset"] - o["ngram_total"] - o["remainder"]) < 1e-4
    assert abs(sum(g["score"] for g in o["ngrams"]) - o["ngram_total"]) < 1e-4
    assert code == main(["explain", "--model", str(tiny_model), "--", text]) == 0       # the table prints too
    capsys.readouterr()
