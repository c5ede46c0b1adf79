"""Encoders (stacked, bidirectional, dropout), BPTT batching with state carry-over, every
head's loss falling in a short run, pretrained vectors, and the task CLI."""
import json

import pytest
import torch

from tests.support import max_diff
from rnnlens.data.batching import Batch, BPTTIterator, Example, collate
from rnnlens.data.vocab import Vocab
from rnnlens.encoder import reverse_padded
from rnnlens.errors import RnnlensError
from rnnlens.models import RNNModel
from rnnlens.cells import CELLS
from rnnlens.config import Config, ModelConfig
from rnnlens.train.trainer import Trainer


def test_reverse_padded_reverses_the_real_tokens_of_any_mask():
    x = torch.arange(12.0).view(3, 4, 1)
    mask = torch.tensor([[1, 1, 1, 1], [1, 1, 0, 0], [0, 1, 0, 1]], dtype=torch.bool)
    r = reverse_padded(x, mask)
    assert r[..., 0].tolist() == [[3, 2, 1, 0], [5, 4, 6, 7], [8, 11, 10, 9]]
    assert max_diff(reverse_padded(r, mask), x) == 0


@pytest.mark.parametrize("cell", ["gru", "lstm", "elman", "transformer"])
def test_padded_batch_equals_each_sequence_alone_in_deep_bidirectional_encoders(cell):
    cfg = ModelConfig(cell=cell, embedding_dim=6, hidden_size=8, layers=2, bidirectional=cell != "transformer",
                      heads=2)
    model = RNNModel(cfg, 20, "tag", ["O", "B-X", "I-X"]).double().eval()
    v = Vocab([f"w{i}" for i in range(18)])
    exs = [Example([f"w{i}" for i in range(k, k + L)], [0] * L) for k, L in ((0, 5), (3, 2), (7, 4))]
    batch = collate(exs, v)
    out = model.encode(batch)
    for b, ex in enumerate(exs):
        alone = model.encode(collate([ex], v))
        L = len(ex.tokens)
        assert max_diff(out[b, :L], alone[0]) < 1e-10


def test_bidirectional_final_state_takes_backward_at_the_first_token():
    cfg = ModelConfig(cell="gru", embedding_dim=4, hidden_size=3, bidirectional=True)
    model = RNNModel(cfg, 10, "classify", ["a", "b"]).double().eval()
    batch = collate([Example(["x"] * 3), Example(["x"])], Vocab(["x"]))
    out = model.encode(batch)
    fin = model.encoder.final(out, batch.mask)
    assert max_diff(fin[0], torch.cat([out[0, 2, :3], out[0, 0, 3:]])) == 0
    assert max_diff(fin[1], out[1, 0]) == 0


def test_recurrent_dropout_is_one_mask_per_sequence_and_off_in_eval():
    cfg = ModelConfig(cell="gru", embedding_dim=4, hidden_size=16, recurrent_dropout=0.5)
    model = RNNModel(cfg, 10, "classify", ["a", "b"]).double()
    batch = collate([Example(["x"] * 6)] * 2, Vocab(["x"]))
    model.eval()
    a, b = model.encode(batch), model.encode(batch)
    assert max_diff(a, b) == 0
    model.train()
    torch.manual_seed(0)
    c = model.encode(batch)
    assert max_diff(c[0], c[1]) > 0            # each row has its own mask


def test_bptt_iterator_and_state_carry_over():
    ids = list(range(2, 2 + 103))
    it = BPTTIterator(ids, batch_size=4, bptt=7)
    segs = list(it)
    assert len(segs) == len(it) == 4              # 25 columns -> 24 predictions in segments of 7
    assert segs[0].tokens[0].tolist() == ids[:7] and segs[0].targets[0].tolist() == ids[1:8]
    assert segs[1].tokens[1].tolist() == ids[25 + 7: 25 + 14]
    assert segs[-1].tokens.shape == (4, 3)
    # Carrying the state over segments == running the whole stream at once.
    cfg = ModelConfig(cell="lstm", embedding_dim=5, hidden_size=6)
    model = RNNModel(cfg, 200, "lm").double().eval()
    whole = torch.cat([model.encode(s) for s in segs], 1)
    model.reset_state()
    full = Batch(it.data[:, :-1], torch.ones(4, 24, dtype=torch.bool), torch.full((4,), 24))
    ref = model.encode(full)
    assert max_diff(whole, ref) < 1e-12
    model.reset_state()
    again = model.encode(segs[1])
    assert max_diff(again, whole[:, 7:14]) > 1e-6     # without the carry the states differ


@pytest.mark.parametrize("name", list(CELLS))
def test_carry_state_false_starts_every_segment_afresh(name):
    """model.carry_state: false (the implicit-ngrams authors' language models): a segment
    after another gives exactly what it gives alone, for every registered cell; with the
    default (carried) it depends on the segment before."""
    it = BPTTIterator(list(range(2, 2 + 103)), batch_size=4, bptt=7)
    segs = list(it)
    outs = {}
    for carry in (True, False):
        cfg = Config.from_dict({"data": {"corpus": "ptb"}, "model": {"cell": name, "embedding_dim": 5, "hidden_size": 4,
                                                                      "carry_state": carry}}).model
        torch.manual_seed(0)
        model = RNNModel(cfg, 200, "lm").double().eval()
        with torch.no_grad():
            for n, p in model.named_parameters():
                if "bias" in n:
                    p.uniform_(-0.5, 0.5)
            model.encode(segs[0])
            after = model.encode(segs[1])
            model.reset_state()
            outs[carry] = (after, model.encode(segs[1]))
    assert max_diff(*outs[False]) == 0
    if name != "transformer":                     # attention over its own segment only: nothing to carry
        assert max_diff(*outs[True]) > 1e-9


def test_carry_state_false_is_for_stream_language_models():
    with pytest.raises(RnnlensError, match="carry_state"):
        Config.from_dict({"data": {"corpus": "sst2"}, "model": {"carry_state": False}})


TASKS = {
    "classify": (["neg", "pos"], lambda r, T: Example(r, int("good" in r))),
    "regress": (None, lambda r, T: Example(r, float(r.count("good") - r.count("bad")))),
    "relation": (["Other", "Cause-Effect(e1,e2)", "Cause-Effect(e2,e1)"],
                 lambda r, T: Example(r, 1 if "good" in r else (2 if "bad" in r else 0))),
    "tag": (["O", "B-X", "E-X", "S-X"], lambda r, T: Example(r, [3 if w == "good" else 0 for w in r])),
}


@pytest.mark.parametrize("task", list(TASKS) + ["lm"])
def test_each_head_loss_falls(task):
    g = torch.Generator().manual_seed(0)
    words = ["good", "bad", "the", "a", "film", "plot", "is", "was"]
    rows = [[words[i] for i in torch.randint(0, 8, (int(torch.randint(2, 9, (1,), generator=g)),),
                                             generator=g)] for _ in range(300)]
    v = Vocab(words)
    cfg = Config.from_dict({"model": {"embedding_dim": 16, "hidden_size": 16, "bidirectional": task == "tag"},
                            "train": {"optimizer": "adam", "lr": 0.02, "epochs": 4}})
    if task == "lm":
        stream = words * 300                       # periodic: predictable from the last word
        model = RNNModel(cfg.model, len(v), "lm")
        train = BPTTIterator(v.encode(stream), 8, 10)
        dev = BPTTIterator(v.encode(stream[:400]), 4, 10)
    else:
        labels, make = TASKS[task]
        exs = [make(r, task) for r in rows]
        from rnnlens.data.batching import BatchIterator
        model = RNNModel(cfg.model, len(v), task, labels)
        train = BatchIterator(exs, v, 16, seed=0)
        dev = BatchIterator(exs[:60], v, 16, shuffle=False)
    tr = Trainer(model, cfg.train, progress=False)
    before = tr.evaluate(dev)
    tr.fit(train, dev)
    after = tr.evaluate(dev)
    print(task, before, after)
    assert after["loss"] < 0.7 * before["loss"]


def test_lm_tied_and_adaptive_heads():
    v = 300
    batch = Batch(torch.randint(2, v, (3, 5)), torch.ones(3, 5, dtype=torch.bool), torch.full((3,), 5),
                  torch.randint(2, v, (3, 5)))
    for cfg in (ModelConfig(embedding_dim=6, hidden_size=6, tie_weights=True),
                ModelConfig(embedding_dim=4, hidden_size=6, tie_weights=True),
                ModelConfig(embedding_dim=6, hidden_size=6, adaptive_softmax=[50, 150])):
        model = RNNModel(cfg, v, "lm")
        out = model(batch)
        loss = model.loss(out, batch)
        assert torch.isfinite(loss)
        once, metrics = model.head.loss_and_metrics(out, batch)
        assert max_diff(once, loss) < 1e-6 and metrics["tokens"] == 15
        assert abs(metrics["nll"] / 15 - loss.item()) < 1e-5
        if cfg.tie_weights:
            assert model.head.out.weight is model.embedding.weight
            assert abs(loss.item() - torch.log(torch.tensor(float(v))).item()) < 1.5
        else:   # the adaptive softmax is a proper distribution over the vocabulary
            lp = model.head.adaptive.log_prob(out.reshape(-1, 6))
            assert max_diff(lp.logsumexp(-1), torch.zeros(15)) < 1e-5


def test_pretrained_vectors(tmp_path):
    from rnnlens.data.vectors import load_vectors
    f = tmp_path / "glove.txt"
    f.write_text("the 1 2 3\nGood 4 5 6\nzzz 7 8 9\n")
    v = Vocab(["the", "good", "bad"])
    vec, found = load_vectors(f, v, 3)
    assert found == 2 and vec[2].tolist() == [1, 2, 3] and vec[3].tolist() == [4, 5, 6]
    assert vec[4].abs().sum() == 0
    with pytest.raises(RnnlensError, match="glove.txt:1"):
        load_vectors(f, v, 4)
    with pytest.raises(RnnlensError, match="does not exist"):
        load_vectors(tmp_path / "none.txt", v, 3)


def test_train_with_frozen_pretrained_vectors(tmp_path, capsys):
    from rnnlens.cli import main
    f = tmp_path / "vec.txt"
    f.write_text("good " + " ".join(["0.5"] * 8) + "\nnot " + " ".join(["-0.5"] * 8) + "\n")
    out = tmp_path / "m"
    code = main(["train", "--out", str(out), "--embedding-dim", "8", "--hidden-size", "8", "--epochs", "1",
                 "--embeddings-file", str(f), "--freeze-embeddings", "true", "--quiet"])
    assert code == 0
    assert "pretrained vectors for 2 of" in capsys.readouterr().out
    from rnnlens.train.checkpoint import load_checkpoint
    model, _, vocab, _ = load_checkpoint(out)
    assert model.embedding.weight[vocab.stoi["good"]].tolist() == [0.5] * 8


def test_configs_are_valid_with_every_budget():
    from tests.support import REPO
    from rnnlens.config import load_config_file
    files = sorted((REPO / "configs").glob("*.json"))
    assert len(files) >= 19
    for f in files:
        d = json.loads(f.read_text())
        for budget in [None, *d.get("budgets", {})]:
            cfg = load_config_file(f, budget=budget)
            assert cfg.data.corpus in f.name
    quick = load_config_file(REPO / "configs" / "sst2-gru.json", budget="quick")
    full = load_config_file(REPO / "configs" / "sst2-gru.json")
    assert quick.train.epochs < full.train.epochs and full.data.max_train_examples is None
    with pytest.raises(RnnlensError, match="defined: full, quick"):
        load_config_file(REPO / "configs" / "sst2-gru.json", budget="huge")


def _write_conll(path, n):
    sents = [[("John", "I-PER"), ("lives", "O"), ("in", "O"), ("New", "I-LOC"), ("York", "I-LOC")],
             [("Mary", "I-PER"), ("visited", "O"), ("Paris", "I-LOC"), (".", "O")]]
    lines = ["-DOCSTART- -X- O O", ""]
    for i in range(n):
        for tok, tag in sents[i % 2]:
            lines.append(f"{tok} NNP I-NP {tag}")
        lines.append("")
    path.write_text("\n".join(lines))


def test_train_and_eval_a_tagger_from_the_cli(tmp_path, capsys):
    from rnnlens.cli import main
    d = tmp_path / "conll2003"
    d.mkdir()
    for name, n in (("eng.train", 40), ("eng.testa", 6), ("eng.testb", 6)):
        _write_conll(d / name, n)
    out = tmp_path / "m"
    code = main(["train", "--task", "tag", "--data", "conll2003", "--data-dir", str(tmp_path), "--out", str(out),
                 "--bidirectional", "true", "--embedding-dim", "8", "--hidden-size", "8", "--epochs", "6",
                 "--optimizer", "adam", "--lr", "0.05", "--quiet"])
    assert code == 0
    printed = capsys.readouterr().out
    assert "test loss=" in printed and "f1=" in printed
    code = main(["eval", "--model", str(out), "--split", "dev", "--json"])
    res = json.loads(capsys.readouterr().out)
    assert code == 0 and res["split"] == "dev" and res["f1"] > 0.5
    code = main(["eval", "--model", str(out), "--split", "nope"])
    assert code == 2 and "available: train, dev, test" in capsys.readouterr().err
    code = main(["train", "--task", "lm", "--data", "conll2003", "--data-dir", str(tmp_path), "--out",
                 str(tmp_path / "x"), "--quiet"])
    assert code == 2 and "is a 'tag' task" in capsys.readouterr().err


def test_train_and_eval_a_language_model_from_the_cli(tmp_path, capsys):
    from rnnlens.cli import main
    d = tmp_path / "ptb"
    d.mkdir()
    text = "\n".join(["the cat sat on the mat", "a dog ran in the park"] * 60)
    for split in ("train", "valid", "test"):
        (d / f"ptb.{split}.txt").write_text(text)
    out = tmp_path / "lm"
    code = main(["train", "--data", "ptb", "--data-dir", str(tmp_path), "--out", str(out), "--embedding-dim", "8",
                 "--hidden-size", "8", "--epochs", "3", "--optimizer", "adam", "--lr", "0.03", "--bptt", "10",
                 "--batch-size", "4", "--tie-weights", "true", "--quiet"])
    assert code == 0
    assert "ppl=" in capsys.readouterr().out
    assert main(["eval", "--model", str(out), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["ppl"] < 8


def test_bench_prints_every_head(capsys):
    from rnnlens.cli import main
    assert main(["bench", "--hidden", "8", "--batch", "2", "--length", "5", "--steps", "1"]) == 0
    out = capsys.readouterr().out
    for head in ("classify", "regress", "relation", "tag", "lm", "reference torch.nn.GRU"):
        assert head in out


def test_max_length_truncates_every_split(tmp_path):
    from rnnlens.train.run import load_data
    rows = ["pos\t" + " ".join(["good"] * 30), "neg\t" + " ".join(["bad"] * 5)] * 3
    (tmp_path / "t.tsv").write_text("\n".join(rows))
    cfg = Config.from_dict({"data": {"corpus": "tsv", "train_file": str(tmp_path / "t.tsv"),
                                     "test_file": str(tmp_path / "t.tsv"), "max_length": 10}})
    data = load_data(cfg)
    assert max(len(ex.tokens) for s in data.splits.values() for ex in s) == 10
    assert any("truncated to their first 10 tokens" in n for n in data.notes)


def test_regression_sign_accuracy_leaves_neutral_targets_out():
    """Hand-worked: outputs [1, -1, 0.5, 2] for targets [2, 1, 0, -1]: the neutral row is
    not counted; of the other three only the first has the right sign -> 1/3."""
    from rnnlens.data.batching import Batch
    from rnnlens.heads.classify import RegressionHead

    head = RegressionHead(4)
    t = torch.tensor([2.0, 1.0, 0.0, -1.0])
    batch = Batch(torch.ones(4, 1, dtype=torch.long), torch.ones(4, 1, dtype=torch.bool), torch.ones(4), t)
    m = head.finalize(head.metrics(torch.tensor([1.0, -1.0, 0.5, 2.0]), batch))
    assert m["sign_accuracy"] == pytest.approx(1 / 3)
    assert m["mse"] == pytest.approx((1 + 4 + 0.25 + 9) / 4)


def test_fold_case_lowercases_a_cased_dataset_and_its_checkpoint_reads_new_text_lowercased(tmp_path):
    from rnnlens.config import Config
    from rnnlens.errors import RnnlensError
    from rnnlens.train.checkpoint import load_checkpoint
    from rnnlens.train.run import load_data
    from rnnlens.cli import main
    d = tmp_path / "conll2003"
    d.mkdir()
    for name, n in (("eng.train", 40), ("eng.testa", 6), ("eng.testb", 6)):
        _write_conll(d / name, n)
    base = {"data": {"corpus": "conll2003", "data_dir": str(tmp_path)}, "model": {"bidirectional": True}}
    kept = load_data(Config.from_dict(base))
    folded = load_data(Config.from_dict({**base, "data": {**base["data"], "fold_case": True}}))
    assert kept.lowercase is False and folded.lowercase is True
    for split in kept.splits:
        a, b = kept.splits[split], folded.splits[split]
        assert [[t.lower() for t in ex.tokens] for ex in a] == [ex.tokens for ex in b]
        assert [ex.label for ex in a] == [ex.label for ex in b]
    assert any(t != t.lower() for ex in kept.splits["train"] for t in ex.tokens)
    assert "tokens lowercased (data.fold_case)" in folded.notes and "tokens keep their case" not in folded.notes
    out = tmp_path / "m"
    assert main(["train", "--task", "tag", "--data", "conll2003", "--data-dir", str(tmp_path), "--out", str(out),
                 "--bidirectional", "true", "--embedding-dim", "8", "--hidden-size", "8", "--epochs", "1",
                 "--fold-case", "true", "--quiet"]) == 0
    assert load_checkpoint(out)[3]["tokenizer"]["lowercase"] is True
    for corpus in ("polarity", "tsv", "dyck", "crossserial"):
        with pytest.raises(RnnlensError, match="data.fold_case is for a named dataset"):
            Config.from_dict({"data": {"corpus": corpus, "fold_case": True}})
