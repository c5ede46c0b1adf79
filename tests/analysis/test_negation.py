"""Negation and intensification study (implicit-ngrams Section 5.2 and E.1): adjective
extraction on a hand-made corpus, the statistics of hand-set models worked out on paper, the
`rnnlens negation` command, and the extraction on the real SST-2."""
import json
import math

import pytest
import torch

from rnnlens.analysis.negation import (FORMS, Adjectives, context_phrase_scores,
                                       extract_adjectives, format_summary, load_lexicon, negation_study,
                                       sentiment_sides, summarize_study)
from rnnlens.analysis.polarity import phrase_scores
from rnnlens.cli import main
from rnnlens.data.batching import Example, collate
from rnnlens.data.vocab import Vocab
from rnnlens.errors import RnnlensError
from rnnlens.models import RNNModel
from rnnlens.train.checkpoint import save_checkpoint
from rnnlens.config import Config, ModelConfig
from tests.support import assert_clean_error as _one_line_error
from tests.support import run_cli as _run

# --- the lexicon and the extraction -------------------------------------------------


@pytest.fixture(scope="module")
def lexicon():
    return load_lexicon()


def test_lexicon_is_textblobs_adjectives_with_senses_averaged(lexicon):
    assert len(lexicon) > 1000
    assert lexicon["good"] == pytest.approx(0.7)
    assert lexicon["clever"] == pytest.approx((0.5 + 0.5 - 0.5) / 3)        # 3 JJ senses
    assert lexicon["ridiculous"] == pytest.approx((-1.0 + 1.0 - 1.0) / 3)   # pitiful / humorous / pitiful
    assert lexicon["incompetent"] == pytest.approx(-0.4)   # JJ senses only (its NN sense is -0.3)
    assert "blech" not in lexicon and "anger" not in lexicon               # UH / VB entries only


def _corpus(pos_label=1, neg_label=0, neutral=None):
    """Per word: (occurrences in positive instances, in negative instances)."""
    counts = {
        "good": (8, 1),        # positive adjective
        "great": (6, 0),       # positive adjective
        "Superb": (3, 0),      # lexicon-positive but 3 occurrences, not > 5 (and lowercased)
        "superb": (2, 0),
        "nice": (9, 3),        # ratio exactly 3: out
        "spielberg": (10, 0),  # passes the ratio, not in the lexicon
        "clever": (7, 0),      # passes, but its senses average to 1/6 < 0.2
        "happy": (0, 7),       # a negative token that the lexicon calls positive: out of both
        "ridiculous": (1, 7),  # multi-sense, mean -1/3: negative adjective
        "bad": (0, 6),         # negative adjective
        "blech": (0, 9),       # passes the ratio, an interjection (not a JJ entry)
        "dull": (4, 12),       # ratio exactly 3: out
        "awful": (0, 6),       # negative adjective, ties with bad on count: alphabetical
    }
    examples = []
    for word, (p, n) in counts.items():
        examples += [Example(["the", word, "film"], pos_label)] * p
        examples += [Example(["a", word], neg_label)] * n
    if neutral is not None:  # neutral instances are not counted at all
        examples += [Example(["nice", "happy", "dull"], neutral)] * 50
    return examples


def test_extraction_on_a_hand_made_corpus(lexicon):
    adj = extract_adjectives(_corpus(), {1}, {0}, lexicon)
    positive, negative = adj
    assert positive == ["good", "great"]
    assert negative == ["ridiculous", "awful", "bad"]
    assert adj.counts == {"good": [8, 1], "great": [6, 0], "ridiculous": [1, 7], "awful": [0, 6], "bad": [0, 6]}
    assert adj.polarity["ridiculous"] == pytest.approx(-1 / 3)
    # frequency step: good, great, spielberg, clever, the, film; happy, ridiculous, bad, blech, awful, a
    assert adj.candidates == {"positive": 6, "negative": 6}
    assert adj.instances == {"positive": 50, "negative": 51}
    d = json.loads(json.dumps(adj.to_dict()))
    assert list(Adjectives.from_dict(d)) == [positive, negative]


def test_extraction_settings_and_regression_labels(lexicon):
    # Looser settings let in "nice", "superb" and "dull".
    pos, neg = extract_adjectives(_corpus(), {1}, {0}, lexicon, ratio=2.9, min_count=4)
    assert pos == ["nice", "good", "great", "superb"] and neg == ["dull", "ridiculous", "awful", "bad"]
    # SST-5 as regression: -2..2, neutral (0) instances ignored.
    sides = sentiment_sides("regress", None)
    examples = _corpus(pos_label=2.0, neg_label=-1.0, neutral=0.0)
    assert list(extract_adjectives(examples, sides.is_positive, sides.is_negative, lexicon)) == [
        ["good", "great"], ["ridiculous", "awful", "bad"]]


def test_sentiment_sides_and_readouts():
    sst2 = sentiment_sides("classify", ["negative", "positive"])
    assert sst2.readout(1) == ([1.0], "row 0 (the logit of 'positive' over 'negative')")
    flipped = sentiment_sides("classify", ["positive", "negative"])
    assert flipped.readout(1)[0] == [-1.0] and flipped.is_positive(0) and flipped.is_negative(1)
    sst5 = sentiment_sides("classify", ["very negative", "negative", "neutral", "positive", "very positive"])
    assert sst5.readout(5)[0] == [-0.5, -0.5, 0.0, 0.5, 0.5] and not sst5.is_positive(2)
    assert sentiment_sides("classify", ["neg", "pos", "other"]).readout(3)[0] == [-1.0, 1.0, 0.0]
    reg = sentiment_sides("regress", None)
    assert reg.readout(1)[0] == [1.0] and reg.is_positive(0.5) and reg.is_negative(-2.0) and not reg.is_positive(0.0)
    mr = sentiment_sides("classify", ["0", "1"], corpus="mr")
    assert mr.positive == {1} and mr.negative == {0}
    for task, labels, corpus, needle in [("classify", ["0", "1"], "subj", "not sentiment labels"),
                                         ("classify", ["a", "b", "c"], None, "a, b, c"),
                                         ("lm", None, "ptb", "language model"),
                                         ("tag", ["O", "B-PER"], "conll2003", "no sentiment labels")]:
        with pytest.raises(RnnlensError, match=needle):
            sentiment_sides(task, labels, corpus)


# --- hand-set models ----------------------------------------------------------------

WORDS = ["not", "very", "good", "nice", "great", "bad", "dull", "awful"]
G = {"not": -0.5, "very": 0.9, "good": 0.8, "nice": 0.6, "great": 0.4, "bad": -0.8, "dull": -0.5, "awful": -0.2}
POS, NEG = ["good", "nice", "great"], ["bad", "dull", "awful"]


def _hand_model(cell: str, w_out: float, recurrent: float | None = None):
    """Embedding size 1 and hidden size 1, so g(x) = tanh(e_x) = G[x] exactly: e_x = atanh(G[x])."""
    vocab = Vocab(WORDS)
    model = RNNModel(ModelConfig(cell=cell, embedding_dim=1, hidden_size=1), len(vocab), "classify",
                     ["negative", "positive"]).double().eval()
    with torch.no_grad():
        model.embedding.weight.zero_()
        for w, g in G.items():
            model.embedding.weight[vocab.stoi[w], 0] = math.atanh(g)
        for name, p in model.encoder.cells[0].named_parameters():
            p.fill_(1.0 if "weight_ih" in name or name == "W.weight" else 0.0)
        if recurrent is not None:
            model.encoder.cells[0].base.weight_hh.fill_(recurrent)
        model.head.out.weight.fill_(w_out)
    return model, vocab


def _medians(summary):
    return {pol: {f: s["median"] for f, s in forms.items()} for pol, forms in summary["groups"].items()}


def test_vm_fixture_negation_reverses_but_very_cannot_intensify():
    """VM (A(x) = diag g(x), g at the first token only), w = 2:
    s(X) = 2 g(X), s(not X) = 2 g(X) g(not), s(very X) = 2 g(X) g(very), s(not not X) = 2 g(X) g(not)^2.
    With g(not) = -1/2 and g(very) = 0.9 < 1, "not" flips the sign and "very" shrinks it."""
    model, vocab = _hand_model("vm", 2.0)
    study = negation_study(model, vocab, POS, NEG)
    assert study.kind == "ngram" and study.skipped == [] and study.skipped_forms == []
    assert len(study.rows) == 6 * 4
    score = {(r.word, r.form): r.score for r in study.rows}
    assert score[("good", "not X")] == pytest.approx(2 * 0.8 * -0.5)
    assert score[("dull", "not not X")] == pytest.approx(2 * -0.5 * 0.25)
    summary = summarize_study(study)
    expected = {"positive": {"X": 1.2, "not X": -0.6, "very X": 1.08, "not not X": 0.3},
                "negative": {"X": -1.0, "not X": 0.5, "very X": -0.9, "not not X": -0.25}}
    got = _medians(summary)
    for pol in expected:
        assert got[pol] == pytest.approx(expected[pol])
    x = summary["groups"]["positive"]["X"]                       # 1.6, 1.2, 0.8
    assert x["count"] == 3 and x["mean"] == pytest.approx(1.2) and x["std"] == pytest.approx(math.sqrt(0.32 / 3))
    assert (x["q1"], x["q3"], x["min"], x["max"]) == pytest.approx((1.0, 1.4, 0.8, 1.6))
    f = summary["findings"]
    assert f["x_has_polarity"] == {"positive": True, "negative": True}
    assert f["not_reverses"] == {"positive": True, "negative": True}
    assert f["very_strengthens"] == {"positive": False, "negative": False}
    assert f["not_not_restores"] == {"positive": True, "negative": True}
    text = format_summary(summary)
    assert "not reverses the median sign: positive yes, negative yes" in text
    assert "very strengthens the median: positive no, negative no" in text
    # the scores are polarity.phrase_scores of the full-span n-gram
    ref = phrase_scores(model, vocab, [["not", "not", "bad"]])
    assert score[("bad", "not not X")] == pytest.approx(ref.item())


def test_mvma_e_fixture_fails_negation_for_negative_adjectives():
    """MVMA-E with H = 1: g(x) = tanh(e_x), A(x) = (1 - g(x)^2) a with a = 2, w = 1, so
    s(not X) = (1 - g(X)^2) a g(not) = -(1 - g(X)^2) < 0 whatever X is: "not" reverses positive
    adjectives and cannot reverse negative ones (the paper's finding for MVMA-E, Section 5.2).
    s(very X) = 1.8 (1 - g(X)^2) > 0; s(not not X) = (1 - g(X)^2) a (1 - g(not)^2) a g(not)
    = -1.5 (1 - g(X)^2) < 0: one sign for every adjective, right for one group only."""
    model, vocab = _hand_model("mvma-e", 1.0, recurrent=2.0)
    study = negation_study(model, vocab, POS, NEG + ["unseen"])
    assert study.skipped == ["unseen"]
    one_minus = {"positive": [0.36, 0.64, 0.84], "negative": [0.36, 0.75, 0.96]}   # 1 - g^2
    expected = {pol: {"X": {"positive": 0.6, "negative": -0.5}[pol], "not X": -v[1], "very X": 1.8 * v[1],
                      "not not X": -1.5 * v[1]} for pol, v in one_minus.items()}
    summary = summarize_study(study.rows)
    got = _medians(summary)
    for pol in expected:
        assert got[pol] == pytest.approx(expected[pol])
    f = summary["findings"]
    assert f["not_reverses"] == {"positive": True, "negative": False}
    assert f["very_strengthens"] == {"positive": True, "negative": False}
    assert f["not_not_restores"] == {"positive": False, "negative": True}
    # Context scores (sum of the n-grams ending at the last token) are the model's own logits
    # for an exact view with final pooling and no output bias.
    ctx = negation_study(model, vocab, POS, NEG, kind="context")
    phrases = [["not", "good"], ["very", "not", "bad"]]
    logits = model(collate([Example(p) for p in phrases], vocab)).detach()
    assert context_phrase_scores(model, vocab, phrases, [1.0]).tolist() == pytest.approx(logits.tolist())
    c = {(r.word, r.form): r.score for r in ctx.rows}
    assert c[("good", "not X")] == pytest.approx(0.8 - 0.36)            # s(good) + s(not good)


def test_study_forms_rows_and_errors():
    model, vocab = _hand_model("vm", 2.0)
    study = negation_study(model, vocab, POS, NEG, forms=("X", "really X", "not X"))
    assert study.skipped_forms == ["really X"] and {r.form for r in study.rows} == {"X", "not X"}
    summary = summarize_study(study)
    assert summary["findings"]["very_strengthens"] == {"positive": None, "negative": None}
    # an explicit row, and a flipped label order, flip every score
    flipped = RNNModel(model.cfg, len(vocab), "classify", ["positive", "negative"]).double().eval()
    flipped.load_state_dict(model.state_dict())
    a = negation_study(model, vocab, POS, NEG).rows
    b = negation_study(flipped, vocab, POS, NEG).rows
    assert [r.score for r in b] == pytest.approx([-r.score for r in a])
    assert [r.score for r in negation_study(flipped, vocab, POS, NEG, row=0).rows] == pytest.approx(
        [r.score for r in a])
    with pytest.raises(RnnlensError, match="placeholder X"):
        negation_study(model, vocab, POS, NEG, forms=("not",))
    with pytest.raises(RnnlensError, match="row 3"):
        negation_study(model, vocab, POS, NEG, row=3)
    tr = RNNModel(ModelConfig(cell="transformer", embedding_dim=4, hidden_size=4), len(vocab), "classify",
                  ["negative", "positive"])
    with pytest.raises(RnnlensError, match="transformer"):
        negation_study(tr, vocab, POS, NEG, kind="ngram")


def test_the_transformer_is_scored_by_the_mean_of_its_outputs():
    """The paper scores its Transformer by the context representation it trains on, the
    mean of the outputs (footnote 10): w^T mean_t out_t of the standalone phrase, dropout off,
    and the model's training mode kept."""
    torch.manual_seed(0)
    vocab = Vocab(WORDS)
    tr = RNNModel(ModelConfig(cell="transformer", embedding_dim=8, hidden_size=8, heads=2, pooling="mean",
                              layer_dropout=0.5, embedding_dropout=0.5),
                  len(vocab), "classify", ["negative", "positive"]).train()
    study = negation_study(tr, vocab, POS, NEG)
    assert study.kind == "context" and tr.training
    tr.eval()
    for r in study.rows:
        toks = r.form.replace("X", r.word).split()
        ids = torch.tensor([vocab.encode(toks)])
        out, _ = tr.encoder(ids, torch.ones_like(ids, dtype=torch.bool))
        want = out.mean(1)[0] @ tr.readout_weight[0]
        logit = tr(collate([Example(toks)], vocab))
        assert r.score == pytest.approx(want.item(), abs=1e-5)
        assert r.score == pytest.approx((logit - tr.head.out.bias).item() if tr.head.out.bias is not None
                                        else logit.item(), abs=1e-5)


def test_regression_head_readout():
    vocab = Vocab(WORDS)
    model = RNNModel(ModelConfig(cell="mvma-g", embedding_dim=4, hidden_size=3, pooling="mean"), len(vocab),
                     "regress", None).eval()
    study = negation_study(model, vocab, POS, NEG)
    assert study.readout.startswith("the regression row")
    ref = phrase_scores(model, vocab, [["very", "good"]])
    assert {(r.word, r.form): r.score for r in study.rows}[("good", "very X")] == pytest.approx(ref.item(), abs=1e-6)


# --- the command line ---------------------------------------------------------------

@pytest.fixture(scope="module")
def tsv_model(tmp_path_factory):
    import random

    d = tmp_path_factory.mktemp("neg")
    rng = random.Random(0)
    pos, neg = ["good", "nice", "great", "charming"], ["bad", "dull", "awful", "boring"]
    rows = []
    for _ in range(300):
        lab = rng.choice(["pos", "neg"])
        adj = rng.choice(pos if lab == "pos" else neg)
        if rng.random() < 0.25:
            rows.append(f"{'neg' if lab == 'pos' else 'pos'}\tthe film was not {adj}")
        else:
            rows.append(f"{lab}\tthe film was {'very ' if rng.random() < 0.3 else ''}{adj}")
    (d / "train.tsv").write_text("\n".join(rows) + "\n")
    out = d / "model"
    assert main(["train", "--corpus", "tsv", "--train-file", str(d / "train.tsv"), "--out", str(out),
                 "--embedding-dim", "8", "--hidden-size", "8", "--epochs", "2", "--quiet"]) == 0
    return out


def test_cli_negation_writes_files(tsv_model, tmp_path, capsys):
    out = tmp_path / "neg"
    code, stdout, err = _run(capsys, "negation", "--model", str(tsv_model), "--model", str(tsv_model),
                             "--out", str(out))
    assert code == 0, err
    assert "negation: model 1/2" in err and "negation: model 2/2" in err
    assert err.count("extracting adjectives") == 1                   # one extraction per corpus
    assert "not reverses the median sign: positive " in stdout and "positive" in stdout
    assert sorted(p.name for p in out.iterdir()) == ["adjectives.json", "negation-model-2.png",
                                                      "negation-model.png", "negation.json"]
    adj = json.loads((out / "adjectives.json").read_text())
    assert adj["positive"] and adj["negative"] and set(adj["counts"]) == set(adj["positive"] + adj["negative"])
    assert adj["models"] == ["model", "model-2"]
    rep = json.loads((out / "negation.json").read_text())
    assert rep["forms"] == list(FORMS) and [m["name"] for m in rep["models"]] == ["model", "model-2"]
    m = rep["models"][0]
    assert len(m["rows"]) == (len(adj["positive"]) + len(adj["negative"])) * 4
    assert set(m["summary"]["findings"]) >= {"not_reverses", "very_strengthens", "not_not_restores"}
    assert (out / "negation-model.png").read_bytes()[:4] == b"\x89PNG"
    # adjectives.json feeds back as --adjectives; --json prints the same report
    code, stdout, _ = _run(capsys, "negation", "--model", str(tsv_model), "--adjectives",
                           str(out / "adjectives.json"), "--json")
    assert code == 0 and json.loads(stdout)["models"][0]["rows"] == m["rows"]
    # an existing output folder is refused without --force
    _one_line_error(*_run(capsys, "negation", "--model", str(tsv_model), "--out", str(out))[::2], "--force")
    assert _run(capsys, "negation", "--model", str(tsv_model), "--out", str(out), "--force")[0] == 0


def test_cli_negation_with_adjectives_file(tsv_model, tmp_path, capsys):
    f = tmp_path / "adj.json"
    f.write_text(json.dumps({"positive": ["good", "splendid"], "negative": ["bad"]}))
    code, stdout, _ = _run(capsys, "negation", "--model", str(tsv_model), "--adjectives", str(f),
                           "--form", "X", "--form", "not X", "--form", "really X")
    assert code == 0
    assert "1 adjective(s) not in the vocabulary, skipped: splendid" in stdout
    assert "form(s) left out, a modifier is not in the vocabulary: really X" in stdout
    f.write_text(json.dumps({"positive": "good"}))
    _one_line_error(*_run(capsys, "negation", "--model", str(tsv_model), "--adjectives", str(f))[::2],
                    "lists 'positive' and 'negative'")


def _untrained_checkpoint(path, task, labels, **model):
    cfg = Config.from_dict({"model": {"embedding_dim": 4, "hidden_size": 4, **model}})
    vocab = Vocab(["good", "bad", "not"])
    path.mkdir()
    save_checkpoint(path, RNNModel(cfg.model, len(vocab), task, labels), cfg, vocab, labels, task)
    return path


def test_cli_negation_bad_input(tmp_path, capsys):
    _one_line_error(*_run(capsys, "negation", "--model", str(tmp_path / "nope"))[::2], "does not exist")
    lm = _untrained_checkpoint(tmp_path / "lm", "lm", None)
    _one_line_error(*_run(capsys, "negation", "--model", str(lm), "--out", str(tmp_path / "o"))[::2],
                    "language model")
    topics = _untrained_checkpoint(tmp_path / "topics", "classify", ["sports", "science"])
    _one_line_error(*_run(capsys, "negation", "--model", str(topics))[::2], "not sentiment labels")
    labels = ["negative", "positive"]
    bi = _untrained_checkpoint(tmp_path / "bi", "classify", labels, bidirectional=True)
    _one_line_error(*_run(capsys, "negation", "--model", str(bi))[::2], "single-layer, one-direction")
    mlp = _untrained_checkpoint(tmp_path / "mlp", "classify", labels, mlp_hidden=3)
    _one_line_error(*_run(capsys, "negation", "--model", str(mlp))[::2], "linear output layer")
    assert not (tmp_path / "o").exists()


# --- real data ----------------------------------------------------------------------

def test_extraction_on_sst2(shared_data, lexicon):
    """The paper extracted 73 positive and 47 negative adjectives from SST-2 (Table 9)."""
    from rnnlens.data.datasets import load_dataset

    ds = load_dataset("sst2", shared_data)
    sides = sentiment_sides(ds.task, ds.labels, "sst2")
    adj = extract_adjectives(ds.splits["train"], sides.is_positive, sides.is_negative, lexicon)
    print(f"SST-2 train phrases: {len(adj.positive)} positive, {len(adj.negative)} negative adjectives "
          f"(paper: 73 / 47); candidates {adj.candidates}")
    print("positive:", ", ".join(adj.positive[:20]))
    print("negative:", ", ".join(adj.negative[:20]))
    assert len(adj.positive) >= 24 and len(adj.negative) >= 24
    assert {"good", "great", "enjoyable"} <= set(adj.positive)
    assert {"bad", "dull", "tedious"} <= set(adj.negative)
    assert adj.positive[0] == "good" and adj.negative[0] == "bad"


def test_the_papers_table9_adjectives_are_built_in(tsv_model, tmp_path, capsys):
    """--adjectives paper-table9 scores the implicit-ngrams paper's Table 9 list (37 positive,
    31 negative as printed) without a file; a file of that name still wins."""
    from rnnlens.analysis.negation import PAPER_TABLE9_NEGATIVE, PAPER_TABLE9_POSITIVE, paper_table9_adjectives
    from rnnlens.app.negation import read_adjectives

    assert len(PAPER_TABLE9_POSITIVE) == len(set(PAPER_TABLE9_POSITIVE)) == 37
    assert len(PAPER_TABLE9_NEGATIVE) == len(set(PAPER_TABLE9_NEGATIVE)) == 31
    assert not set(PAPER_TABLE9_POSITIVE) & set(PAPER_TABLE9_NEGATIVE)
    pos, neg = paper_table9_adjectives()
    assert ("good" in pos and "nice" in pos) and ("bad" in neg and "tedious" in neg)
    code, stdout, _ = _run(capsys, "negation", "--model", str(tsv_model), "--adjectives", "paper-table9",
                           "--form", "X", "--form", "not X")
    assert code == 0 and "adjectives from the implicit-ngrams paper's Table 9: 37 positive" in stdout
    assert "not in the vocabulary, skipped" in stdout        # the toy vocabulary has few of them
    own = tmp_path / "paper-table9"
    own.write_text(json.dumps({"positive": ["good"], "negative": ["bad"]}))
    import os

    here = os.getcwd()
    os.chdir(tmp_path)
    try:
        assert read_adjectives("paper-table9").positive == ["good"]
    finally:
        os.chdir(here)
