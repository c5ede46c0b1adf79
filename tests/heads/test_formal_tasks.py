"""The tasks of the unitary-networks paper (section 11.5) wired into training: Dyck and
cross-serial next-symbol heads scored as the paper scores them (hand-made predictions with
hand-counted answers), the agreement reader and head, Wilson intervals, the LM agreement
test, and short end-to-end runs through the CLI and the train_run API."""
import gzip
import json
import math

import pytest
import torch

from tests.support import REPO
from rnnlens.analysis.agreement import agreement_lm_eval
from rnnlens.analysis.breakdown import error_table, max_error_over_epochs, peak_error_by_epoch, read_metrics
from rnnlens.data.batching import Batch, BPTTIterator, Example, collate
from rnnlens.data.datasets import _next_symbol_examples, load_dataset
from rnnlens.data.formal import CLOSERS, CROSS_SYMBOLS, OPENERS, START, STOP, crossserial_correct
from rnnlens.data.agreement import read_agreement_testset, read_linzen_tsv
from rnnlens.data.vocab import Vocab
from rnnlens.errors import RnnlensError
from rnnlens.heads.agreement import AgreementHead
from rnnlens.data.formal import dyck_majority_baseline
from rnnlens.heads.formal import CrossSerialHead, DyckHead
from rnnlens.metrics import accuracy_by, wilson_interval
from rnnlens.models import RNNModel
from rnnlens.config import Config, ModelConfig
from rnnlens.metrics import merge_metrics
from rnnlens.train.trainer import Trainer

FIXTURE = REPO / "tests" / "fixtures" / "agr_sample.tsv"
DYCK_SYMBOLS = list(OPENERS + CLOSERS)
CROSS = list(CROSS_SYMBOLS) + [STOP]


def batch_of(strings, symbols, info=None) -> Batch:
    """Strings like "([])" -> a padded Batch laid out as the dyck/crossserial loaders do."""
    toks = [[START] + list(s) if isinstance(s, str) else s for s in strings]
    return collate(_next_symbol_examples(toks, symbols, info), Vocab([START] + symbols))


# --- Dyck: closing-bracket accuracy ------------------------------------------------------

def dyck_logits(batch, wanted: dict) -> torch.Tensor:
    """Logits [B,T,C] that are 0 except `wanted[(b, t)] = symbol` gets 5."""
    out = torch.zeros(*batch.tokens.shape, len(DYCK_SYMBOLS))
    for (b, t), sym in wanted.items():
        out[b, t, DYCK_SYMBOLS.index(sym)] = 5.0
    return out


def test_dyck_metric_on_hand_made_predictions():
    """String 0, <s> ( [ ] ): the ']' at position 3 (predicted from t = 2) has 0 attractors,
    depth 2; the ')' at 4 (from t = 3) has 1 attractor ('[' between), depth 1.
    String 1, <s> { } (padded): the '}' at 2 (from t = 1): 0 attractors, depth 1.
    Predictions: t=2 of string 0 says ']' (right); t=3 says ']' (wrong: ')' is due) with an
    opener scored higher still, which must not count (argmax over the closers only);
    t=1 of string 1 says '}' (right). So 2 of 3: attractors 0 -> 2/2, 1 -> 0/1;
    depth 1 -> 1/2, depth 2 -> 1/1."""
    batch = batch_of(["([])", "{}"], DYCK_SYMBOLS)
    logits = dyck_logits(batch, {(0, 2): "]", (0, 3): "]", (1, 1): "}"})
    logits[0, 3, DYCK_SYMBOLS.index("<")] = 9.0          # an opener: ignored
    head = DyckHead(4, DYCK_SYMBOLS)
    m = head.metrics(logits, batch)
    assert m == {"dyck_correct": [1, 0, 1], "dyck_attractors": [0, 1, 0], "dyck_depth": [2, 1, 1]}
    res = head.finalize(m)
    assert res["accuracy"] == pytest.approx(2 / 3) and res["closing_error"] == pytest.approx(1 / 3)
    assert res["closers"] == 3
    assert {k: (r["n"], r["correct"]) for k, r in res["by_attractors"].items()} == {"0": (2, 2), "1": (1, 0)}
    assert {k: (r["n"], r["correct"]) for k, r in res["by_depth"].items()} == {"1": (2, 1), "2": (1, 1)}
    assert res["by_attractors"]["1"]["error"] == 1.0 and res["peak_attractor_error"] == 1.0
    json.dumps(res)                                       # goes into metrics.jsonl as it is


def test_dyck_metrics_merge_across_batches_like_one_batch():
    strings = ["([])", "{}", "(<>)[]", "<{[]}>"]
    g = torch.Generator().manual_seed(1)
    whole = batch_of(strings, DYCK_SYMBOLS)
    logits = torch.randn(*whole.tokens.shape, len(DYCK_SYMBOLS), generator=g)
    head = DyckHead(4, DYCK_SYMBOLS)
    merged: dict = {}
    for rows in ([0, 1], [2, 3]):
        part = batch_of([strings[i] for i in rows], DYCK_SYMBOLS)
        T = part.tokens.shape[1]
        merge_metrics(merged, head.metrics(logits[rows, :T], part))
    assert head.finalize(merged) == head.finalize(head.metrics(logits, whole))
    # the 2nd half alone: "(<>)[]" and "<{[]}>", 6 closers, attractors counted by hand
    assert merged["dyck_attractors"][3:] == [0, 1, 0, 0, 1, 2]
    assert merged["dyck_depth"][3:] == [2, 1, 1, 3, 2, 1]


def test_next_symbol_loss_covers_every_position_with_a_next_symbol():
    batch = batch_of(["([])", "{}"], DYCK_SYMBOLS)
    logits = torch.randn(*batch.tokens.shape, len(DYCK_SYMBOLS))
    head = DyckHead(4, DYCK_SYMBOLS)
    nll = []
    for b, s in enumerate(["([])", "{}"]):
        for t, sym in enumerate(s):                       # position t predicts s[t]
            nll.append(-torch.log_softmax(logits[b, t], -1)[DYCK_SYMBOLS.index(sym)])
    assert head.loss(logits, batch).item() == pytest.approx(torch.stack(nll).mean().item(), rel=1e-6)
    assert head.target_mask(batch).tolist() == [[True] * 4 + [False], [True, True, False, False, False]]


def test_dyck_majority_baseline_hand_worked():
    """Train closers: ')' x2, ']' x1 -> always ')'. On "([])": ']' (0 attractors) is
    missed, ')' (1 attractor) is hit."""
    train = [[START] + list("()()[]")]
    base = dyck_majority_baseline(train, [[START] + list("([])")])
    assert base["label"] == ")" and base["accuracy"] == 0.5
    assert {k: r["correct"] for k, r in base["by_attractors"].items()} == {"0": 0, "1": 1}


def test_dyck_loader_sizes_dev_like_test_and_baseline():
    ds = load_dataset("dyck", None, seed=3, train_size=2000, dev_size=300, test_size=400)
    assert ds.task == "dyck" and ds.labels == DYCK_SYMBOLS
    assert [len(ds.splits[k]) for k in ("train", "dev", "test")] == [2000, 300, 400]
    from rnnlens.data.formal import dyck_depth
    ex = ds.splits["train"][0]
    assert ex.tokens[0] == START and len(ex.tokens) == 21
    assert [DYCK_SYMBOLS[i] for i in ex.label] == ex.tokens[1:]
    assert max(dyck_depth(e.tokens) for e in ds.splits["train"]) == 3
    assert max(dyck_depth(e.tokens) for e in ds.splits["dev"]) > 3     # drawn like test
    assert ds.splits["dev"][0].tokens != ds.splits["test"][0].tokens
    note = next(n for n in ds.notes if n.startswith("majority baseline"))
    err = float(note.rsplit("error ", 1)[1].split()[0])
    print(note)
    assert 0.7 < err < 0.9                                  # the paper's 80%
    with pytest.raises(RnnlensError, match="takes no options"):
        load_dataset("sst2", REPO, train_size=3)


# --- cross-serial: full-string correctness -------------------------------------------------

def test_crossserial_metric_on_hand_made_predictions():
    """s0 = a b c d, predictions = the true next symbols: right.
    s1 = a c: after 'a' the model says 'a' (not what came, but a^2 c^2 is in C_10): right.
    s2 = a b c d: after 'a b c' it says 'c' (only d can follow): wrong.
    By m + n: 2 -> 1 of 2 (s0, s2), 1 -> 1 of 1."""
    strings = [[START, "a", "b", "c", "d", STOP], [START, "a", "c", STOP], [START, "a", "b", "c", "d", STOP]]
    preds = [["a", "b", "c", "d", STOP], ["a", "a", STOP], ["a", "b", "c", "c", STOP]]
    batch = batch_of(strings, CROSS, {"k": 10})
    logits = torch.zeros(*batch.tokens.shape, len(CROSS))
    for b, p in enumerate(preds):
        for t, sym in enumerate(p):
            logits[b, t, CROSS.index(sym)] = 1.0
    head = CrossSerialHead(4, CROSS)
    m = head.metrics(logits, batch)
    assert m["cross_correct"] == [1, 1, 0] == [int(crossserial_correct(s, p)) for s, p in zip(strings, preds)]
    res = head.finalize(m)
    assert res["accuracy"] == pytest.approx(2 / 3) and res["string_error"] == pytest.approx(1 / 3)
    assert {k: (r["n"], r["correct"]) for k, r in res["by_length"].items()} == {"1": (1, 1), "2": (2, 1)}


def test_crossserial_validity_follows_the_k_of_each_example():
    """a^7 c^7 (in C_8): predicting an 8th 'a' after a^7 is valid in C_10 (a^8 c^8 has
    m + n = 8 < 10) but not in C_8."""
    s = [START] + ["a"] * 7 + ["c"] * 7 + [STOP]
    preds = s[1:]
    preds[7] = "a"                                           # after <s> a^7
    head = CrossSerialHead(4, CROSS)
    for k, expected in ((10, 1), (8, 0)):
        batch = batch_of([s], CROSS, {"k": k})
        logits = torch.zeros(*batch.tokens.shape, len(CROSS))
        for t, sym in enumerate(preds):
            logits[0, t, CROSS.index(sym)] = 1.0
        assert head.metrics(logits, batch)["cross_correct"] == [expected]
        assert crossserial_correct(s, preds, k) == bool(expected)


# --- agreement: reader, head, Wilson intervals ----------------------------------------------

def test_wilson_interval_known_values():
    lo, hi = wilson_interval(8, 10)
    print(lo, hi)
    assert (round(lo, 4), round(hi, 4)) == (0.4902, 0.9433)
    z2 = 1.96 ** 2                  # at k = 0 the upper end is z^2 / (n + z^2); at k = n the lower, n / (n + z^2)
    assert wilson_interval(0, 10)[0] == 0.0 and wilson_interval(0, 10)[1] == pytest.approx(z2 / (10 + z2))
    assert wilson_interval(10, 10)[1] == 1.0 and wilson_interval(10, 10)[0] == pytest.approx(10 / (10 + z2))
    assert wilson_interval(0, 0) == (0.0, 1.0)
    # the defining equation |k/n - p| = z sqrt(p (1 - p) / n) holds at both ends
    for k, n in ((3, 7), (50, 120), (1, 2)):
        for p in wilson_interval(k, n):
            assert abs(k / n - p) == pytest.approx(1.96 * math.sqrt(p * (1 - p) / n), abs=1e-12)
    scipy_stats = pytest.importorskip("scipy.stats")
    for k, n in ((8, 10), (3, 7), (0, 5), (120, 130)):
        ci = scipy_stats.binomtest(k, n).proportion_ci(0.95, method="wilson")
        assert wilson_interval(k, n) == pytest.approx((ci.low, ci.high), abs=1e-3)   # scipy's z is 1.95996
    with pytest.raises(ValueError):
        wilson_interval(3, 2)


def test_linzen_tsv_reader_on_the_fixture(tmp_path):
    rows = read_linzen_tsv(FIXTURE)
    assert len(rows) == 12
    r = rows[0]                       # the keys to the cabinet are on the table .
    assert r.prefix == ["the", "keys", "to", "the", "cabinet"] and r.number == "plural"
    assert (r.attractors, r.intervening, r.verb, r.subject) == (1, 1, "are", "keys")
    assert rows[2].prefix == ["the", "dog"] and rows[2].number == "singular" and rows[2].attractors == 0
    assert rows[6].prefix == ["the", "man", "who", "said", '"', "yes", '"']          # a quoted csv field
    assert rows[7].prefix == ["the", "NN", "near", "the", "NNS"]                    # rare words as POS
    assert read_linzen_tsv(FIXTURE, column="orig_sentence")[7].prefix == ["the", "zygote", "near", "the", "ovaries"]
    assert (rows[8].attractors, rows[8].intervening) == (2, 2) and (rows[5].attractors, rows[5].intervening) == (1, 2)
    assert [r.number for r in rows].count("singular") == 7
    assert len(read_linzen_tsv(FIXTURE, max_sentence_length=9)) == 6
    gz = tmp_path / "agr.tsv.gz"
    gz.write_bytes(gzip.compress(FIXTURE.read_bytes()))
    assert [(r.prefix, r.number) for r in read_linzen_tsv(gz)] == [(r.prefix, r.number) for r in rows]
    lines = FIXTURE.read_text().splitlines()
    for bad, needle in ((lines[1].replace("\tVBP\t", "\tVBD\t"), ":2: verb_pos 'VBD'"),
                        (lines[1].replace("\t6\t1\t", "\t60\t1\t"), ":2: verb_index 60 is outside")):
        p = tmp_path / "bad.tsv"
        p.write_text("\n".join([lines[0], bad]) + "\n")
        with pytest.raises(RnnlensError, match=needle):
            read_linzen_tsv(p)
    p.write_text("sentence\tverb\nthe dog runs\truns\n")
    with pytest.raises(RnnlensError, match="header lacks verb_pos"):
        read_linzen_tsv(p)


def test_agreement_head_accuracy_by_attractors_with_intervals():
    """Targets [1, 0, 1, 0, 1] with attractors [0, 0, 1, 1, 2]; binary logits [+, +, +, -, -]
    predict [1, 1, 1, 0, 0]: attractors 0 -> 1/2, 1 -> 2/2, 2 -> 0/1."""
    head = AgreementHead(4, 2)
    logits = torch.tensor([2.0, 1.0, 3.0, -1.0, -2.0])
    exs = [Example(["w"], y, {"attractors": a}) for y, a in zip([1, 0, 1, 0, 1], [0, 0, 1, 1, 2])]
    v = Vocab(["w"])
    merged: dict = {}
    for idx in (slice(0, 2), slice(2, 5)):                   # merging two batches
        merge_metrics(merged, head.metrics(logits[idx], collate(exs[idx], v)))
    res = head.finalize(merged)
    assert res["accuracy"] == pytest.approx(3 / 5)
    counts = {k: (r["n"], r["correct"]) for k, r in res["by_attractors"].items()}
    assert counts == {"0": (2, 1), "1": (2, 2), "2": (1, 0)}
    assert (res["by_attractors"]["0"]["low"], res["by_attractors"]["0"]["high"]) == wilson_interval(1, 2)
    assert res["by_attractors"] == accuracy_by([1, 0, 1, 1, 0], [0, 0, 1, 1, 2], interval=True)


def test_agreement_dataset_and_training_end_to_end(tmp_path):
    lines = FIXTURE.read_text().splitlines()
    d = tmp_path / "agreement"
    d.mkdir()
    text = "\n".join([lines[0]] + lines[1:] * 10) + "\n"
    (d / "agr_50_mostcommon_10K.tsv.gz").write_bytes(gzip.compress(text.encode()))
    ds = load_dataset("agreement", tmp_path, seed=0)
    assert ds.task == "agreement" and ds.labels == ["singular", "plural"]
    assert [len(ds.splits[k]) for k in ("train", "dev", "test")] == [108, 6, 6]
    assert any(n.startswith("majority baseline (always singular)") for n in ds.notes)
    cfg = Config.from_dict({"data": {"task": "agreement", "data_dir": str(tmp_path)},
                            "model": {"cell": "lstm", "embedding_dim": 8, "hidden_size": 8},
                            "train": {"optimizer": "adam", "lr": 0.02, "epochs": 2, "batch_size": 16}})
    assert cfg.data.corpus == "agreement"                     # --task agreement implies the corpus
    from rnnlens.train.run import train_run
    out = tmp_path / "run"
    out.mkdir()
    res = train_run(cfg, out, progress=False)
    assert set(res.test["by_attractors"]) <= {"0", "1", "2"}
    row = next(iter(res.test["by_attractors"].values()))
    assert row["low"] <= row["accuracy"] <= row["high"]
    rec = read_metrics(out)
    assert "train_by_attractors" in rec[0] and "dev_by_attractors" in rec[0]


# --- Dyck and cross-serial end to end -------------------------------------------------------

def test_train_dyck_from_the_cli_writes_the_breakdowns(tmp_path, capsys):
    from rnnlens.cli import main
    out = tmp_path / "dyck"
    code = main(["train", "--task", "dyck", "--train-size", "1024", "--dev-size", "256", "--test-size", "256",
                 "--cell", "lstm", "--embedding-dim", "8", "--hidden-size", "16", "--epochs", "2",
                 "--batch-size", "128", "--optimizer", "adam", "--lr", "0.01", "--out", str(out), "--quiet"])
    assert code == 0
    printed = capsys.readouterr().out
    assert "test loss=" in printed and "closing_error=" in printed
    rec = read_metrics(out)
    epochs = [r for r in rec if "epoch" in r]
    assert len(epochs) == 2
    for r in epochs:
        assert set(r["dev_by_attractors"]) >= {"0", "1", "2"} and set(r["dev_by_depth"]) >= {"1", "2", "3", "4"}
        assert sum(v["n"] for v in r["dev_by_attractors"].values()) == r["dev_closers"] == 256 * 10
        assert type(r["dev_closers"]) is int                 # a count, in every JSON output
        assert r["dev_closing_error"] == pytest.approx(1 - r["dev_accuracy"])
    test = rec[-1]
    assert test["split"] == "test" and "test_by_attractors" in test
    worst = max_error_over_epochs(out)
    for k, w in worst.items():
        assert w["error"] == max(r["dev_by_attractors"][k]["error"] for r in epochs if k in r["dev_by_attractors"])
    peaks = peak_error_by_epoch(rec)
    assert [p["epoch"] for p in peaks] == [1, 2]
    assert peaks[0]["error"] == epochs[0]["dev_peak_attractor_error"]
    assert peaks[0]["train_loss"] == epochs[0]["train_loss"]
    table = error_table(out)
    print(table)
    assert table.splitlines()[0].split()[:2] == ["attractors", "n"] and len(table.splitlines()) == 1 + len(worst)
    print(error_table(out, split="test", by="by_depth"))
    saved = json.loads((out / "config.json").read_text())
    assert saved["config"]["data"]["corpus"] == "dyck" and saved["task"] == "dyck"
    capsys.readouterr()
    assert main(["eval", "--model", str(out), "--split", "test", "--json"]) == 0
    res = json.loads(capsys.readouterr().out)
    assert res["accuracy"] == pytest.approx(test["test_accuracy"]) and "by_attractors" in res
    assert type(res["closers"]) is int and type(test["test_closers"]) is int


def test_crossserial_train_run_api(tmp_path):
    from rnnlens.train.run import train_run
    cfg = Config.from_dict({"data": {"corpus": "crossserial", "train_size": 512, "dev_size": 256, "test_size": 256},
                            "model": {"cell": "gru", "embedding_dim": 8, "hidden_size": 16, "output_bias": True},
                            "train": {"optimizer": "adam", "lr": 0.02, "epochs": 2, "batch_size": 64}})
    res = train_run(cfg, tmp_path, progress=False)
    assert res.labels == CROSS
    assert set(res.test) >= {"accuracy", "string_error", "strings", "by_length"}
    assert res.test["strings"] == 256 and type(res.test["strings"]) is int and set(res.test["by_length"]) <= {str(i) for i in range(10)}
    last = [r for r in res.history if "epoch" in r][-1]
    assert any(int(k) >= 8 for k in last["dev_by_length"])                 # lengths unseen in training
    assert max_error_over_epochs(tmp_path, by="by_length")


def test_formal_config_fields_are_checked():
    with pytest.raises(RnnlensError, match="for the dyck and crossserial corpora only"):
        Config.from_dict({"data": {"corpus": "sst2", "train_size": 10}})
    with pytest.raises(RnnlensError, match="does not apply to corpus 'dyck'"):
        Config.from_dict({"data": {"corpus": "dyck", "train_k": 8}})
    with pytest.raises(RnnlensError, match=r"test_depth must be in \[1, 1000\]"):
        Config.from_dict({"data": {"task": "dyck", "test_depth": 0}})
    assert Config.from_dict({"data": {"task": "crossserial"}}).data.corpus == "crossserial"
    with pytest.raises(RnnlensError, match="one-direction"):
        RNNModel(ModelConfig(bidirectional=True), 12, "dyck", DYCK_SYMBOLS)


# --- agreement as a language-model test -------------------------------------------------------

def _write_testset(base, rows):
    base.with_suffix(".text").write_text("\n".join(s for s, *_ in rows) + "\n")
    base.with_suffix(".gold").write_text("\n".join("\t".join(map(str, g)) for _, *g in rows) + "\n")


def test_agreement_lm_eval_hand_checkable(tmp_path):
    """An LM whose output ignores the state (weights 0) and whose bias puts 'runs' above
    'run': items whose correct form is 'runs' are right, those with 'run' are wrong; an
    item whose verb is not in the vocabulary is skipped."""
    vocab = Vocab(["<eos>", "the", "dog", "dogs", "runs", "run", "near", "cat"])
    model = RNNModel(ModelConfig(cell="lstm", embedding_dim=4, hidden_size=4), len(vocab), "lm")
    with torch.no_grad():
        model.head.out.weight.zero_()
        model.head.out.bias.zero_()
        model.head.out.bias[vocab.stoi["runs"]] = 1.0
    base = tmp_path / "items"
    _write_testset(base, [("the dog runs . <eos>", 2, "runs", "run", 0),
                          ("the dogs near the cat run . <eos>", 5, "run", "runs", 1),
                          ("the dog barks . <eos>", 2, "barks", "bark", 0)])
    res = agreement_lm_eval(model, vocab, base)
    assert res["correct"] == [True, False, None]
    assert (res["n"], res["skipped"], res["accuracy"]) == (2, 1, 0.5)
    assert {k: (r["n"], r["correct"]) for k, r in res["by_attractors"].items()} == {"0": (1, 1), "1": (1, 0)}
    assert (res["low"], res["high"]) == wilson_interval(1, 2)
    assert res["unknown_rate"] == 0.0
    assert agreement_lm_eval(model, vocab, base.with_suffix(".text"))["correct"] == res["correct"]
    with pytest.raises(RnnlensError, match="needs a language model"):
        agreement_lm_eval(RNNModel(ModelConfig(), len(vocab), "classify", ["a", "b"]), vocab, base)


def test_agreement_lm_eval_with_a_tiny_trained_lm(tmp_path, shared_data):
    """Plumbing on the real test sets: a tiny LM trained on a few sentences reads every
    item of Linzen et al.'s subset and of Gulordava et al.'s set (mostly as <unk>)."""
    words = "the dog runs . <eos> the dogs run . <eos> the key is here . <eos> the keys are here . <eos>".split()
    vocab = Vocab(sorted(set(words) | {"is", "are", "has", "have"}))
    cfg = Config.from_dict({"model": {"cell": "lstm", "embedding_dim": 8, "hidden_size": 16},
                            "train": {"optimizer": "adam", "lr": 0.02, "epochs": 15}})
    model = RNNModel(cfg.model, len(vocab), "lm")
    Trainer(model, cfg.train, progress=False).fit(BPTTIterator(vocab.encode(words * 50), 4, 10))
    base = tmp_path / "mini"
    _write_testset(base, [("the dog runs . <eos>", 2, "runs", "run", 0), ("the dogs run . <eos>", 2, "run", "runs", 0)])
    assert agreement_lm_eval(model, vocab, base)["correct"] == [True, True]    # learned: dog runs, dogs run
    linzen = agreement_lm_eval(model, vocab, shared_data / "agreement" / "linzen_testset")
    assert linzen["n"] + linzen["skipped"] == 7489 and set(linzen["by_attractors"]) <= {"0", "1", "2", "3", "4"}
    assert linzen["n"] > 0 and linzen["unknown_rate"] > 0.5
    items = read_agreement_testset(shared_data / "agreement" / "gulordava2018_english" / "generated")
    assert len(items) == 410
    first = items[0]
    assert first.prefix == "An agreeable insight executed in fifty".split()
    assert (first.correct, first.wrong, first.attractors) == ("represents", "represent", 0)
    assert [sum(it.attractors == a for it in items) for a in (0, 1, 2)] == [330, 70, 10]
    lin = read_agreement_testset(shared_data / "agreement" / "linzen_testset")
    assert sum(it.attractors == 4 for it in lin) == 330 and lin[1].correct == "have"


def test_train_select_picks_the_epoch_by_the_named_dev_metric(tmp_path, capsys):
    """train.select peak_attractor_error (minimised: the name ends in "error") keeps the epoch
    whose dev peak error is lowest (ties: lower dev loss); a metric the dev split lacks is a
    one-line error with exit code 2, and a malformed spec is refused before training."""
    from rnnlens.cli import main
    tiny = ["train", "--task", "dyck", "--train-size", "512", "--dev-size", "128", "--test-size", "128",
            "--cell", "lstm", "--embedding-dim", "8", "--hidden-size", "8", "--epochs", "4", "--patience", "4",
            "--batch-size", "128", "--optimizer", "adam", "--lr", "0.03", "--quiet"]
    out = tmp_path / "sel"
    assert main([*tiny, "--select", "peak_attractor_error", "--out", str(out)]) == 0
    epochs = [r for r in read_metrics(out) if "epoch" in r]
    best = min(epochs, key=lambda r: (r["dev_peak_attractor_error"], r["dev_loss"]))
    assert epochs[-1]["best_epoch"] == best["epoch"]
    assert json.loads((out / "config.json").read_text())["config"]["train"]["select"] == "peak_attractor_error"
    capsys.readouterr()
    for spec, words in (("no_such_metric", "no 'no_such_metric'"), ("accuracy:upward", "must be a metric name")):
        try:
            code = main([*tiny, "--select", spec, "--out", str(tmp_path / spec.replace(":", "-"))])
        except SystemExit as e:
            code = e.code
        assert code == 2
        err = capsys.readouterr().err
        assert words in err and "Traceback" not in err and len(err.strip().splitlines()) == 1
        assert not (tmp_path / spec.replace(":", "-")).exists()
