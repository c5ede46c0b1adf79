import json
import os

import pytest
import torch

from tests.support import max_diff
from rnnlens.data.batching import BatchIterator
from rnnlens.data.synthetic import PolarityCorpus
from rnnlens.data.vocab import Vocab
from rnnlens.errors import RnnlensError
from rnnlens.models import RNNModel
from rnnlens.train.checkpoint import load_checkpoint, output_dir
from rnnlens.config import Config, load_config_file
from rnnlens.train.run import train_run
from rnnlens.train.trainer import Trainer, seed_everything

SMALL = {"model": {"embedding_dim": 8, "hidden_size": 8}, "train": {"epochs": 2}}


def small_setup(optimizer="adagrad", lr=0.05, cell="gru", epochs=4):
    seed_everything(0)
    corpus = PolarityCorpus(seed=0, train_size=600, dev_size=100, test_size=100)
    vocab = Vocab.build(ex.tokens for ex in corpus.split("train"))
    cfg = Config.from_dict({"model": {"cell": cell, "embedding_dim": 16, "hidden_size": 16},
                            "train": {"optimizer": optimizer, "lr": lr, "epochs": epochs}})
    model = RNNModel(cfg.model, len(vocab), "classify", ["negative", "positive"])
    train = BatchIterator(corpus.split("train"), vocab, 32, seed=0)
    dev = BatchIterator(corpus.split("dev"), vocab, 32, shuffle=False)
    return model, cfg, train, dev


@pytest.mark.parametrize("optimizer,lr,epochs", [("adagrad", 0.3, 4), ("adam", 0.03, 4), ("sgd", 2.0, 12)])
def test_training_lowers_the_loss(optimizer, lr, epochs):
    model, cfg, train, dev = small_setup(optimizer, lr, epochs=epochs)
    trainer = Trainer(model, cfg.train, progress=False)
    before = trainer.evaluate(dev)["loss"]
    trainer.fit(train, dev)
    after = trainer.evaluate(dev)["loss"]
    print(optimizer, before, after)
    assert after < 0.8 * before


def test_best_epoch_weights_are_restored():
    model, cfg, train, dev = small_setup()
    trainer = Trainer(model, cfg.train, progress=False)
    hist = trainer.fit(train, dev)
    best = next(r for r in hist if r["epoch"] == trainer.best_epoch)
    assert trainer.evaluate(dev)["loss"] == pytest.approx(best["dev_loss"], rel=1e-6)


def test_early_stopping_when_dev_does_not_improve():
    model, cfg, train, dev = small_setup("sgd", 1e-30)
    cfg.train.epochs, cfg.train.patience = 20, 2
    hist = Trainer(model, cfg.train, progress=False).fit(train, dev)
    assert len(hist) == 3                      # the first epoch, then two without improvement


@pytest.mark.parametrize("decay_patience,lrs", [     # the rate after each of the 8 epochs
    (1, [1, 1, .5, .25, .25, .125, .0625, .03125]),      # every bad epoch
    (2, [1, 1, 1, .5, .5, .5, .25, .25]),                # ReduceLROnPlateau(patience=2)
    (3, [1, 1, 1, 1, 1, 1, 1, .5]),                      # an improvement starts the count again
])
def test_lr_decays_after_its_own_patience_and_counts_again_after_each_decay(monkeypatch, decay_patience, lrs):
    model, cfg, train, dev = small_setup("sgd", 1.0, epochs=8)
    cfg.train.patience, cfg.train.lr_decay, cfg.train.lr_decay_patience = 10, 0.5, decay_patience
    trainer = Trainer(model, cfg.train, progress=False)
    scores = iter([0.5, 0.6, 0.6, 0.6, 0.7, 0.7, 0.7, 0.7])      # bad epochs: 3, 4; 6, 7, 8
    monkeypatch.setattr(trainer, "evaluate", lambda batches: {"loss": 1.0, "accuracy": next(scores)})
    monkeypatch.setattr(trainer, "_train_epoch", lambda epoch, batches: {"loss": 1.0})
    hist = trainer.fit(train, dev)
    assert [r["lr"] for r in hist] == lrs             # record["lr"]: the rate for the next epoch


@pytest.mark.parametrize("optimizer", ["adagrad", "adam", "sgd"])
def test_reset_optimizer_starts_every_epoch_from_a_fresh_state_at_the_current_lr(optimizer, monkeypatch):
    def trained(reset):
        model, cfg, train, dev = small_setup(optimizer, 0.05, epochs=3)
        cfg.train.reset_optimizer, cfg.train.patience, cfg.train.lr_decay = reset, 10, 0.5
        trainer = Trainer(model, cfg.train, progress=False)
        scores = iter([0.6, 0.5, 0.7])                   # epoch 2 is worse: lr halves after it
        real = trainer.evaluate
        monkeypatch.setattr(trainer, "evaluate", lambda batches: {**real(batches), "accuracy": next(scores)})
        hist = trainer.fit(train, dev)
        return model, trainer, hist
    reset, trainer, hist = trained(True)
    assert [r["lr"] for r in hist] == [0.05, 0.025, 0.025]          # the rate survives each reset
    assert trainer.optimizer.param_groups[0]["lr"] == 0.025
    for p in reset.parameters():                                     # what a new optimizer holds
        state = trainer.optimizer.state[p]
        assert not state or (float(state["step"]) == 0 and float(state["sum"].abs().max()) == 0)
    flat = lambda m: torch.cat([p.detach().flatten() for p in m.parameters()])   # noqa: E731
    again, _, _ = trained(True)
    kept, _, _ = trained(False)
    assert max_diff(flat(again), flat(reset)) == 0                     # deterministic
    if optimizer == "sgd":                                           # plain SGD has no state to reset
        assert max_diff(flat(kept), flat(reset)) == 0
    else:
        assert max_diff(flat(kept), flat(reset)) > 1e-6


def test_time_limit_stops_between_epochs_and_keeps_the_best(tmp_path):
    model, cfg, train, dev = small_setup(epochs=20)
    cfg.train.time_limit = 1e-9                  # spent by the end of the first epoch
    trainer = Trainer(model, cfg.train, metrics_path=tmp_path / "m.jsonl", progress=False)
    hist = trainer.fit(train, dev)
    assert [r.get("epoch") for r in hist] == [1, None]
    assert hist[-1]["stopped"] == "time_limit" and hist[-1]["after_epoch"] == 1 and hist[-1]["time_limit"] == 1e-9
    assert trainer.best_epoch == 1
    with pytest.raises(RnnlensError, match="time_limit"):
        Config.from_dict({"train": {"time_limit": 0}})


def test_non_finite_loss_is_a_clear_error():
    model, cfg, train, dev = small_setup()
    with torch.no_grad():
        model.embedding.weight.fill_(float("nan"))
    with pytest.raises(RnnlensError, match="step 1"):
        Trainer(model, cfg.train, progress=False).fit(train, dev)


def _run(tmp_path, name, d=SMALL):
    out = tmp_path / name
    out.mkdir()
    return train_run(Config.from_dict(d), out, progress=False), out


def test_training_is_deterministic_and_checkpoint_roundtrips(tmp_path):
    r1, out1 = _run(tmp_path, "a")
    r2, out2 = _run(tmp_path, "b")
    strip = lambda p: [{k: v for k, v in json.loads(line).items() if k != "seconds"}  # noqa: E731
                       for line in p.read_text().splitlines()]
    m1 = strip(out1 / "metrics.jsonl")
    assert m1 == strip(out2 / "metrics.jsonl")
    assert len(m1) == 3 and m1[-1]["split"] == "test"           # 2 epochs + test
    assert sorted(p.name for p in out1.iterdir()) == ["config.json", "metrics.jsonl",
                                                      "model.safetensors", "vocab.json"]
    model, cfg, vocab, meta = load_checkpoint(out1)
    assert meta["labels"] == ["negative", "positive"] and vocab.itos == r1.vocab.itos
    assert cfg.to_dict() == Config.from_dict(SMALL).to_dict()
    from rnnlens.data.batching import collate
    batch = collate(PolarityCorpus().split("test")[:16], vocab)
    assert max_diff(model(batch), r1.model(batch)) == 0


def test_lstm_and_elman_and_mean_pooling_train(tmp_path):
    for i, (cell, pooling) in enumerate([("lstm", "final"), ("elman", "mean")]):
        d = {"model": {"cell": cell, "pooling": pooling, "embedding_dim": 8, "hidden_size": 8,
                       "output_bias": True, "dropout": 0.1}, "train": {"epochs": 1}}
        r, _ = _run(tmp_path, str(i), d)
        assert r.test["accuracy"] > 0.5


def test_config_validation_lists_valid_keys(tmp_path):
    with pytest.raises(RnnlensError, match="hidden_size"):
        Config.from_dict({"model": {"hiden_size": 3}})
    with pytest.raises(RnnlensError, match="valid: data, model, train"):
        Config.from_dict({"modle": {}})
    with pytest.raises(RnnlensError, match="cell"):
        Config.from_dict({"model": {"cell": "bogus"}})
    with pytest.raises(RnnlensError, match="model.hidden_size must be an integer, got 2.5"):
        Config.from_dict({"model": {"hidden_size": 2.5}})
    with pytest.raises(RnnlensError, match="version 99"):
        Config.from_dict({"version": 99})
    assert Config.from_dict({"train": {"lr": 0.1, "clip": None}}).train.lr == 0.1
    with pytest.raises(RnnlensError, match='train.lr must be a number, got "0.1"'):   # text is for flags only
        Config.from_dict({"train": {"lr": "0.1"}})
    (tmp_path / "c.toml").write_text('[model]\ncell = "lstm"\n[train]\nepochs = 2\n')
    assert load_config_file(tmp_path / "c.toml").model.cell == "lstm"
    (tmp_path / "c.json").write_text("{not json")
    with pytest.raises(RnnlensError, match="not valid JSON"):
        load_config_file(tmp_path / "c.json")


def test_output_dir_is_atomic(tmp_path):
    target = tmp_path / "out"
    with pytest.raises(ZeroDivisionError):
        with output_dir(target) as tmp:
            (tmp / "partial").write_text("x")
            1 / 0
    assert not target.exists() and list(tmp_path.iterdir()) == []
    with output_dir(target) as tmp:
        (tmp / "a").write_text("1")
    with pytest.raises(RnnlensError, match="--force"):
        with output_dir(target):
            pass
    with output_dir(target, force=True) as tmp:
        (tmp / "b").write_text("2")
    assert [p.name for p in target.iterdir()] == ["b"]
    assert [p.name for p in tmp_path.iterdir()] == ["out"]


def test_select_last_keeps_the_final_epoch_and_never_stops_early():
    model, cfg, train, dev = small_setup(optimizer="adam", lr=0.5, epochs=4)   # lr too high: dev wobbles
    cfg.train.select, cfg.train.patience = "last", 1
    trainer = Trainer(model, cfg.train, progress=False)
    history = trainer.fit(train, dev)
    assert [h["epoch"] for h in history if "epoch" in h] == [1, 2, 3, 4] and trainer.best_epoch == 4
    assert all(h["best_epoch"] == h["epoch"] for h in history if "epoch" in h)
    final = {k: v.clone() for k, v in model.state_dict().items()}
    assert abs(trainer.evaluate(dev)["loss"] - history[-1]["dev_loss"]) < 1e-6   # the last epoch's weights
    assert all(torch.equal(final[k], v) for k, v in model.state_dict().items())
    with pytest.raises(RnnlensError, match="'last' takes no"):
        Config.from_dict({"train": {"select": "last:min"}})


def test_output_dir_removes_what_killed_runs_left_and_spares_live_ones(tmp_path):
    """A process killed mid-run (SIGKILL: no cleanup) leaves .NAME.tmp-HOST-PID-*; the next
    output_dir for NAME removes it once PID is gone, and never a live process's folder."""
    import subprocess
    import sys

    from rnnlens.train.checkpoint import _host

    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    orphan = tmp_path / f".out.tmp-{_host()}-{dead.pid}-x1"
    live = tmp_path / f".out.tmp-{_host()}-{os.getpid()}-x2"
    other = tmp_path / f".other.tmp-{_host()}-{dead.pid}-x3"             # another output's: not this call's
    for d in (orphan, live, other):
        d.mkdir()
        (d / "model.safetensors").write_text("half")
    with output_dir(tmp_path / "out") as tmp:
        (tmp / "a").write_text("1")
    assert not orphan.exists() and live.is_dir() and other.is_dir() and (tmp_path / "out" / "a").is_file()


def test_init_from_starts_from_a_trained_model_and_refuses_an_incompatible_one(tmp_path):
    """train.init_from: a second phase starts from the first phase's weights (at lr ~0 it
    ends where it started); dropout may differ, weights, vocabulary and labels may not."""
    few = {"max_train_examples": 200}
    r1, out1 = _run(tmp_path, "first", {**SMALL, "data": few})
    phase2 = {"data": few, "model": {"embedding_dim": 8, "hidden_size": 8, "dropout": 0.3},
              "train": {"epochs": 1, "optimizer": "sgd", "lr": 1e-12, "init_from": str(out1)}}
    r2, out2 = _run(tmp_path, "second", phase2)
    w1, w2 = r1.model.state_dict(), r2.model.state_dict()
    assert set(w1) == set(w2) and all(max_diff(w1[k], w2[k]) < 1e-9 for k in w1)
    fresh, _ = _run(tmp_path, "fresh", {**phase2, "train": {**phase2["train"], "init_from": None}})
    assert max(max_diff(w1[k], fresh.model.state_dict()[k]) for k in w1) > 1e-3   # not by chance
    _, cfg, _, _ = load_checkpoint(out2)
    assert cfg.train.init_from == str(out1)                     # the saved config says where it came from
    bad = [({"model": {"embedding_dim": 8, "hidden_size": 12}}, r"weight_ih is \[24, 8\] in the file but \[36, 8\]"),
           ({"model": {"embedding_dim": 8, "hidden_size": 8, "cell": "lstm"}}, r"in the file but \[32, 8\]"),
           ({"model": {"embedding_dim": 8, "hidden_size": 8, "mlp_hidden": 4}}, "another architecture"),
           ({"model": {"embedding_dim": 8, "hidden_size": 8}, "data": {**few, "max_vocab": 20}}, "vocabulary"),
           ({"model": {"embedding_dim": 8, "hidden_size": 8}, "train": {"init_from": str(tmp_path / "nope")}},
            "does not exist")]
    for i, (d, msg) in enumerate(bad):
        d = {"data": few, **d, "train": {"epochs": 1, "init_from": str(out1), **d.get("train", {})}}
        with pytest.raises(RnnlensError, match=msg) as e:
            _run(tmp_path, f"bad{i}", d)
        assert str(e.value).startswith("train.init_from ") and "\n" not in str(e.value)



@pytest.mark.parametrize("task", ["lm-sentences", "lm-stream", "dyck", "tag", "classify"])
def test_evaluated_loss_is_the_mean_over_the_splits_units_however_it_is_batched(task):
    # The dev loss is the mean over what the head's loss averages (tokens, scored positions,
    # sentences), not over batch rows: the same split batched two ways gives the same loss, and
    # a language model's is log perplexity.
    import math

    from rnnlens.config import Config
    from rnnlens.data import formal
    from rnnlens.data.batching import Batch, collate
    from rnnlens.data.datasets import _next_symbol_examples
    from rnnlens.data.vocab import Vocab
    from rnnlens.models import RNNModel

    V = 16                        # (the Dyck vocabulary's 13 entries fit)
    data = {"lm-sentences": {"corpus": "ptb", "sentence_level": True}, "lm-stream": {"corpus": "ptb"},
            "dyck": {"task": "dyck"}, "tag": {"task": "tag"}, "classify": {}}[task]
    head = task.split("-")[0]
    symbols = list(formal.OPENERS + formal.CLOSERS)
    labels = {"tag": ["O", "B-X", "I-X"], "classify": ["a", "b", "c"], "dyck": symbols}.get(head)
    cfg = Config.from_dict({"data": data, "model": {"embedding_dim": 5, "hidden_size": 4, "cell": "gru"}})
    torch.manual_seed(0)
    model = RNNModel(cfg.model, V, head, labels, sentence_level=cfg.data.sentence_level)
    trainer = Trainer(model, cfg.train, progress=False)
    g = torch.Generator().manual_seed(1)
    L = torch.tensor([9, 8, 2, 2])
    mask = torch.arange(9)[None] < L[:, None]
    tokens = torch.randint(2, V, (4, 9), generator=g) * mask
    y = torch.randint(0, 3, (4,), generator=g) if head == "classify" else \
        torch.randint(1, 3 if head != "lm" else V, (4, 9), generator=g) * mask

    def rows(lo, hi):
        T = int(L[lo:hi].max())
        return Batch(tokens[lo:hi, :T], mask[lo:hi, :T], L[lo:hi], y[lo:hi] if y.dim() == 1 else y[lo:hi, :T])

    ways = ([rows(0, 4)], [rows(0, 2), rows(2, 4)], [rows(0, 1), rows(1, 3), rows(3, 4)])
    if task == "lm-stream":       # two segments of one stream, the second shorter (the stream's tail)
        full = torch.ones(4, 9, dtype=torch.bool)
        ways = ([Batch(tokens[:, :7], full[:, :7], torch.full((4,), 7), y[:, :7]),
                 Batch(tokens[:, 7:], full[:, 7:], torch.full((4,), 2), y[:, 7:])],)
    if head == "dyck":            # strings of two lengths, so positions and rows weigh differently
        exs = _next_symbol_examples(formal.dyck_corpus(2, 16, 3, 0) + formal.dyck_corpus(2, 4, 3, 1), symbols)
        vocab = Vocab([formal.START, *symbols])
        ways = ([collate(exs, vocab)], [collate(exs[:2], vocab), collate(exs[2:], vocab)],
                [collate(exs[:1], vocab), collate(exs[1:3], vocab), collate(exs[3:], vocab)])
    results = [trainer.evaluate(batches) for batches in ways]
    for r in results[1:]:
        assert r["loss"] == pytest.approx(results[0]["loss"], rel=1e-6)
    if head == "lm":
        for r in results:
            assert r["loss"] == pytest.approx(math.log(r["ppl"]), rel=1e-6)


@pytest.mark.parametrize("name, direction", [("ppl", "min"), ("mse", "min"), ("unk_rate", "min"), ("loss", "min"),
                                             ("closing_error", "min"), ("accuracy", "max"), ("f1", "max"),
                                             ("ppl:max", "max"), ("accuracy:min", "min")])
def test_select_minimises_what_is_better_low(name, direction):
    from rnnlens.config import parse_select

    assert parse_select(name) == (name.split(":")[0], direction)


def test_every_heads_own_select_direction_is_what_select_would_read_from_its_name():
    # a head's own (metric, direction) and `--select METRIC` without a suffix agree, head by head
    from rnnlens.config import parse_select
    from rnnlens.heads import base

    heads = set()
    stack = [base.Head]
    while stack:
        cls = stack.pop()
        heads.add(cls)
        stack.extend(cls.__subclasses__())
    import rnnlens.heads  # noqa: F401  (every head class registered)
    for cls in heads:
        assert parse_select(cls.select[0]) == cls.select, cls


@pytest.mark.parametrize("case", ["no such metric", "no dev split"])
def test_select_that_cannot_be_followed_is_refused_before_any_training(case, tmp_path, capsys):
    from tests.support import run_cli

    (tmp_path / "train.tsv").write_text("".join(f"{'pos' if i % 2 else 'neg'}\tfilm {i} {'good' if i % 2 else 'bad'}\n"
                                                for i in range(20)))
    (tmp_path / "dev.tsv").write_text("pos\tgood film\nneg\tbad film\n")
    dev = ["--dev-file", tmp_path / "dev.tsv"] if case == "no such metric" else []
    code, out, err = run_cli(capsys, "train", "--corpus", "tsv", "--train-file", tmp_path / "train.tsv", *dev,
                             "--select", "nosuch" if dev else "accuracy", "--out", tmp_path / "m",
                             "--hidden-size", "4", "--epochs", "1", "--checkpoint-every", "1")
    assert code == 2 and len(err.strip().splitlines()) == 1
    assert ("no 'nosuch'; they are accuracy" if dev else "no dev split") in err
    assert "epoch 1" not in out and not (tmp_path / "m").exists() and not (tmp_path / "m.partial").exists()
