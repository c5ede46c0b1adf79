"""The explanation adds up to the model's output, for every registered cell and every head.

`explain_text` (behind `rnnlens explain` and the report) decomposes the number the model
outputs as offset + n-grams + remainder. Here that number is recomputed independently
(the model's own forward, the head's bias included) for every cell in CELLS and every
head: binary, multi-class, regression, tagger, language model (plain, tied, adaptive),
Dyck; one layer, stacked, bidirectional, and a memory network. An exact view whose output
is its state has no remainder.
"""
import pytest
import torch

from rnnlens.analysis.sentence import explain_text
from rnnlens.cells import CELLS
from rnnlens.data.batching import Example, collate
from rnnlens.data.vocab import Vocab
from rnnlens.errors import RnnlensError
from rnnlens.models import RNNModel
from rnnlens.config import ModelConfig

WORDS = "the movie was not very good bad at all".split()
VOCAB = Vocab.build([WORDS])
TEXT = "the movie was not good at all".split()
MAXPLUS = [n for n in CELLS if "max" in n]


def model_for(cell: str, task: str = "classify", labels=("neg", "pos"), **kw) -> RNNModel:
    torch.manual_seed(0)
    cfg = ModelConfig(cell=cell, embedding_dim=6, hidden_size=4, output_bias=True, **kw)
    model = RNNModel(cfg, len(VOCAB), task, list(labels) if labels else None).double().eval()
    with torch.no_grad():            # biases away from zero, so a left-out bias would show
        for name, p in model.named_parameters():
            if "bias" in name:
                p.uniform_(-0.5, 0.5)
    return model


def model_output(model, tokens, target_index=None, position=None):
    """The model's own output for the explained quantity, computed without the explainer."""
    batch = collate([Example(list(tokens))], VOCAB)
    model.reset_state()
    with torch.no_grad():
        out = model(batch)[0]
        if model.task == "lm" and model.head.adaptive is not None:
            out = model.head.adaptive.log_prob(out)
    model.reset_state()
    if position is not None:
        out = out[position]
    return out if target_index is None else out[target_index]


def check_adds_up(ex):
    for p in ex.positions:
        total = p.offset + p.ngram_total + p.remainder
        assert abs(total - p.output) < 1e-9, (p.position, total, p.output)
        if ex.exact:
            assert abs(p.remainder) < 1e-9, (p.position, p.remainder)


SENTENCE_CELLS = [n for n in CELLS if n not in MAXPLUS]


@pytest.mark.parametrize("cell", SENTENCE_CELLS)
@pytest.mark.parametrize("grad", [True, False])
def test_binary_classifier_total_is_the_models_logit_for_every_cell(cell, grad):
    model = model_for(cell)
    with torch.set_grad_enabled(grad):
        ex = explain_text(model, VOCAB, TEXT)
        neg = explain_text(model, VOCAB, TEXT, target="neg")
    logit = float(model_output(model, TEXT))
    assert abs(ex.positions[0].output - (logit if ex.prediction == "pos" else -logit)) < 1e-10
    assert abs(neg.positions[0].output + logit) < 1e-10          # toward the first label: -logit
    check_adds_up(ex)
    check_adds_up(neg)
    assert ex.probabilities["pos"] == pytest.approx(float(torch.sigmoid(torch.tensor(logit))))


@pytest.mark.parametrize("cell", SENTENCE_CELLS)
def test_multiclass_regression_and_mean_pooling_for_every_cell(cell):
    model = model_for(cell, labels=("a", "b", "c"), pooling="mean")
    for target in (None, "c"):
        ex = explain_text(model, VOCAB, TEXT, target=target)
        k = ["a", "b", "c"].index(ex.positions[0].target)
        assert abs(ex.positions[0].output - float(model_output(model, TEXT, k))) < 1e-10
        check_adds_up(ex)
    reg = model_for(cell, task="regress", labels=None)
    ex = explain_text(reg, VOCAB, TEXT)
    assert abs(ex.positions[0].output - float(model_output(reg, TEXT))) < 1e-10
    check_adds_up(ex)


@pytest.mark.parametrize("cell", ["elman", "gru", "lstm", "mvma-g", "rrnn-b", "rrnn-c-gated"])
@pytest.mark.parametrize("shape", [dict(layers=2), dict(bidirectional=True),
                                   dict(layers=2, bidirectional=True)])
def test_stacked_and_bidirectional_use_the_same_path(cell, shape):
    if cell not in CELLS:
        pytest.skip(f"{cell} not registered")
    model = model_for(cell, **shape)
    ex = explain_text(model, VOCAB, TEXT, target="neg")        # refused on 2 layers before
    assert abs(ex.positions[0].output + float(model_output(model, TEXT))) < 1e-10
    assert ex.prediction in ("neg", "pos") and ex.probabilities is not None
    check_adds_up(ex)
    assert ex.positions[0].ngrams.shape[0] == (2 if shape.get("bidirectional") else 1)


SEQ_CELLS = [n for n in SENTENCE_CELLS if n not in ("mvm-g", "mvm-l", "mvm-e", "vm", "mm")]


@pytest.mark.parametrize("cell", SENTENCE_CELLS)
def test_language_model_is_explained_per_next_word_prediction(cell):
    model = model_for(cell, task="lm", labels=None)
    ex = explain_text(model, VOCAB, TEXT)
    assert len(ex.positions) == len(TEXT)
    for p in ex.positions:
        k = VOCAB.stoi[p.target]
        assert abs(p.output - float(model_output(model, TEXT, k, p.position))) < 1e-10
    check_adds_up(ex)
    ex = explain_text(model, VOCAB, TEXT, target="good")
    assert {p.target for p in ex.positions} == {"good"}
    check_adds_up(ex)


@pytest.mark.parametrize("kw", [dict(tie_weights=True), dict(adaptive_softmax=[3]), dict(layers=2),
                                dict(memory="rm", memory_size=3), dict(memory="rmr", memory_size=3)])
def test_language_model_variants(kw):
    model = model_for("lstm", task="lm", labels=None, **kw)
    ex = explain_text(model, VOCAB, TEXT)
    for p in ex.positions:
        assert abs(p.output - float(model_output(model, TEXT, VOCAB.stoi[p.target], p.position))) < 1e-10
    check_adds_up(ex)


@pytest.mark.parametrize("cell", ["gru", "lstm", "mvma-g", "rrnn-b"])
@pytest.mark.parametrize("bidirectional", [False, True])
def test_tagger_explains_each_tokens_emission(cell, bidirectional):
    tags = ["O", "B-X", "I-X"]
    model = model_for(cell, task="tag", labels=tags, bidirectional=bidirectional)
    ex = explain_text(model, VOCAB, TEXT)
    assert len(ex.positions) == len(TEXT) and len(ex.predicted) == len(TEXT)
    for p in ex.positions:
        assert abs(p.output - float(model_output(model, TEXT, tags.index(p.target), p.position))) < 1e-10
    check_adds_up(ex)


def test_dyck_head_is_explained_per_symbol():
    syms = ["(", ")", "[", "]"]
    vocab = Vocab.build([syms])
    torch.manual_seed(0)
    model = RNNModel(ModelConfig(cell="gru", embedding_dim=4, hidden_size=5), len(vocab), "dyck", syms).double()
    ex = explain_text(model.eval(), vocab, ["(", "[", "]", ")"])
    check_adds_up(ex)
    assert all(p.target in syms for p in ex.positions)


@pytest.mark.parametrize("cell", MAXPLUS)
def test_max_plus_models_are_refused_with_a_pointer_to_wfsa(cell):
    model = model_for(cell)
    with pytest.raises(RnnlensError, match="wfsa"):
        explain_text(model, VOCAB, TEXT)


def test_unknown_target_and_regression_target_are_one_line_errors():
    with pytest.raises(RnnlensError, match="not a label"):
        explain_text(model_for("gru"), VOCAB, TEXT, target="neutral")
    with pytest.raises(RnnlensError, match="not a word"):
        explain_text(model_for("gru", task="lm", labels=None), VOCAB, TEXT, target="zebra")
    with pytest.raises(RnnlensError, match="regression"):
        explain_text(model_for("gru", task="regress", labels=None), VOCAB, TEXT, target="pos")


@pytest.mark.parametrize("cell", SENTENCE_CELLS)
def test_one_layer_contributions_are_the_papers_scores_and_remainder(cell):
    """For one layer and a linear head on the final state, the contributions are
    w^T v_{i:T} and the remainder is w^T (h_T - sum_i v_{i:T}) (through the output gain)."""
    from rnnlens.analysis.ngrams import ngram_scores, remainder

    model = model_for(cell)
    ex = explain_text(model, VOCAB, TEXT, target="pos")
    batch = collate([Example(TEXT)], VOCAB)
    enc = model.encoder
    x = model.embedding(batch.tokens).detach()
    c = enc.cells[0]
    T = len(TEXT)
    with torch.no_grad():
        view = c.linear_view(x, batch.mask)
        gain = c.output_gain(x, batch.mask)
        w = model.readout_weight[0]
        wT = w if gain is None else w * gain[0, T - 1]
        scores = ngram_scores(view, wT)[0, T - 1, :, 0]
        p = ex.positions[0]
        assert float((torch.as_tensor(p.ngrams[0, T - 1]) - scores).abs().max()) < 1e-10
        assert abs(p.ngrams.sum() - p.ngrams[0, T - 1].sum()) < 1e-12       # only n-grams ending at T
        assert abs(p.offset - float(model.head.out.bias[0])) < 1e-10
        if gain is None:
            states = c.scan(x, batch.mask)[0]
            rest = remainder(view, states)[0, T - 1, view.readout] @ w
            assert abs(p.remainder - float(rest)) < 1e-10


# --- the commands: explain and report print the same totals, equal to the model's output ----

def saved(path, cell="gru", task="classify", labels=("neg", "pos"), **model):
    from rnnlens.train.checkpoint import save_checkpoint
    from rnnlens.config import Config

    torch.manual_seed(0)
    cfg = Config.from_dict({"data": {"sentence_level": task == "lm"},
                            "model": {"cell": cell, "embedding_dim": 6, "hidden_size": 4, "output_bias": True,
                                      **model}})
    labels = None if labels is None else list(labels)
    m = RNNModel(cfg.model, len(VOCAB), task, labels, sentence_level=cfg.data.sentence_level)
    with torch.no_grad():
        for name, p in m.named_parameters():
            if "bias" in name:
                p.uniform_(-0.5, 0.5)
    path.mkdir(parents=True)
    save_checkpoint(path, m, cfg, VOCAB, labels, task)
    return path


def loaded_output(path, tokens):
    from rnnlens.train.checkpoint import load_checkpoint

    model, *_ = load_checkpoint(path)
    return model.eval(), model_output(model.eval(), tokens)


COMMAND_MODELS = {
    "binary": dict(), "three": dict(labels=("a", "b", "c")), "stacked-bi": dict(layers=2, bidirectional=True),
    "lstm-stacked": dict(cell="lstm", layers=2), "rrnn-gated": dict(cell="rrnn-b-gated"),
    "regress": dict(task="regress", labels=None), "tagger": dict(task="tag", labels=("O", "B-X", "I-X")),
    "tagger-bi": dict(task="tag", labels=("O", "B-X", "I-X"), bidirectional=True),
    "lm": dict(task="lm", labels=None, cell="lstm"),
    "lm-memory": dict(task="lm", labels=None, cell="lstm", memory="rm", memory_size=3),
}


@pytest.mark.parametrize("kind", list(COMMAND_MODELS))
def test_explain_command_prints_the_models_output(kind, tmp_path, capsys):
    import json
    import re

    from rnnlens.cli import main

    spec = COMMAND_MODELS[kind]
    path = saved(tmp_path / kind, **spec)
    text = " ".join(TEXT)
    assert main(["explain", "--model", str(path), text, "--json"]) == 0
    d = json.loads(capsys.readouterr().out)
    model, out = loaded_output(path, TEXT)
    names = _names(model)
    for o in d["outputs"]:
        want = out if o["position"] is None else out[o["position"]]
        if want.dim():
            want = want[names.index(o["target"])]
        want = float(want)
        if kind in ("binary", "stacked-bi", "lstm-stacked", "rrnn-gated") and o["target"] == "neg":
            want = -want
        assert abs(o["output"] - want) < 1e-5, (o, want)
        assert abs(o["output"] - (o["offset"] + o["ngram_total"] + o["remainder"])) < 1e-5
    assert len(d["outputs"]) == (len(TEXT) if spec.get("task") in ("tag", "lm") else 1)
    # the terminal form prints the same totals
    assert main(["explain", "--model", str(path), text]) == 0
    printed = capsys.readouterr().out
    assert printed.startswith("prediction: ")
    totals = [float(m.group(1)) for m in re.finditer(r"([+-]\d+\.\d+) = offset", printed)]
    assert totals == pytest.approx([o["output"] for o in d["outputs"]], abs=1e-3)


def _names(model):
    if model.task == "lm":
        return list(VOCAB.itos)
    if model.task == "tag":
        return list(model.head.tags)
    return list(model.labels or [])


@pytest.mark.parametrize("kind", ["binary", "stacked-bi", "tagger", "lm"])
def test_report_and_explain_agree(kind, tmp_path, capsys):
    import json

    from rnnlens.cli import main
    from rnnlens.app.report import build_report

    path = saved(tmp_path / kind, **COMMAND_MODELS[kind])
    text = " ".join(TEXT)
    assert main(["explain", "--model", str(path), text, "--json"]) == 0
    d = json.loads(capsys.readouterr().out)
    build_report(path, tmp_path / "report", sentences=[text], faithfulness_sentences=0, negation=False,
                 progress=False)
    (sample,) = json.loads((tmp_path / "report" / "report.json").read_text())["samples"]
    if "outputs" in sample:
        got = [o["output"] for o in sample["outputs"]]
    else:
        got = [sample["output"]]
    assert got == pytest.approx([o["output"] for o in d["outputs"]], abs=1e-9)


def test_explain_command_refuses_max_plus_with_one_line(tmp_path, capsys):
    from rnnlens.cli import main

    path = saved(tmp_path / "mp", cell="rrnn-b-maxplus")
    adjectives = tmp_path / "adj.json"
    adjectives.write_text('{"positive": ["good"], "negative": ["bad"]}')
    doc = tmp_path / "doc.txt"
    doc.write_text("the movie was good " * 20)
    for argv in (["explain", "--model", str(path), "the movie"], ["explain", "--model", str(path), "--file", str(doc)],
                 ["negation", "--model", str(path), "--adjectives", str(adjectives)]):
        assert main(argv) == 2
        err = capsys.readouterr().err
        assert len(err.strip().splitlines()) == 1 and "rnnlens wfsa" in err, err


@pytest.mark.parametrize("kind", list(COMMAND_MODELS))
def test_explain_file_for_every_head(kind, tmp_path, capsys):
    """A document of every kind of model: scored toward a target row (needed where there are
    several and no single default), or refused in one line; never a traceback."""
    import json

    from rnnlens.cli import main

    spec = COMMAND_MODELS[kind]
    path = saved(tmp_path / kind, **spec)
    doc = tmp_path / "doc.txt"
    doc.write_text("the movie was not very good at all " * 60)
    target = {"three": "b", "tagger": "B-X", "tagger-bi": "B-X", "lm": "good", "lm-memory": "good"}.get(kind)
    code = main(["explain", "--model", str(path), "--file", str(doc), "--json"]
                + (["--target", target] if target else []))
    out, err = capsys.readouterr()
    one_direction = not spec.get("bidirectional") and spec.get("layers", 1) == 1
    if not one_direction or spec.get("memory"):
        assert code == 2 and len(err.strip().splitlines()) == 1, err
        assert ("memory block" if spec.get("memory") else "one-layer") in err
        return
    assert code == 0, err
    d = json.loads(out)
    assert d["tokens"] == 8 * 60 and len(d["ngrams"]) == 20
    if target:
        assert d["target"] == target
        assert main(["explain", "--model", str(path), "--file", str(doc)]) == 2
        err = capsys.readouterr().err
        assert len(err.strip().splitlines()) == 1 and "--target" in err


@pytest.mark.parametrize("cell", SENTENCE_CELLS)
def test_exact_deletion_and_greedy_on_every_cell(cell):
    """The deletion readings of the exact view run on every cell's sentence model, on rows of
    different lengths: finite, zero at pads; exact-greedy with no rounds is exact-deletion,
    and its first pick is exact-deletion's top token."""
    from rnnlens.analysis.token_attributions import METHODS, make_batch

    model = model_for(cell)
    ids = [[VOCAB.stoi[w] for w in TEXT], [VOCAB.stoi[w] for w in TEXT[:3]], [VOCAB.stoi["good"]]]
    b = make_batch(ids, "cpu")
    single = METHODS["exact-deletion"](model, b)
    assert single.shape == b.tokens.shape and bool(torch.isfinite(single).all())
    assert bool((single[~b.mask] == 0).all())
    assert torch.equal(METHODS["exact-greedy"](model, b, rounds=0), single)
    greedy = METHODS["exact-greedy"](model, b, rounds=2)
    assert bool(torch.isfinite(greedy).all()) and bool((greedy[~b.mask] == 0).all())
    for i, r in enumerate(ids[:2]):
        n = len(r)
        assert int(greedy[i, :n].argmax()) == int(single[i, :n].argmax())
    assert float(greedy[2, 0]) == float(single[2, 0])          # one token: nothing to pick
