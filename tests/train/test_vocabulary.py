"""The vocabulary comes from the whole training split, whatever part of it the budget
(data.max_train_examples) lets a model train on, with data.min_count and data.max_vocab
applied to that whole split; and the unknown-token rate of each evaluated split is reported
(a note at training, unk_rate beside a language model's perplexity)."""
import json

import pytest
import torch

from rnnlens.cli import main
from rnnlens.data.batching import Batch
from rnnlens.data.vocab import Vocab
from rnnlens.heads.lm import LMHead
from rnnlens.config import Config
from rnnlens.train.run import build_vocab, load_data, train_run, unk_rate


def write_ptb_like(root, lines=60):
    """A PTB-shaped folder: the first lines use words a..e, the later ones f..j too, so a
    stream capped to its start meets only a..e; every word but 'rare' occurs at least twice."""
    first = ["a b c d e"] * (lines // 2)
    later = ["f g h i j a"] * (lines // 2 - 1) + ["rare f"]
    folder = root / "ptb"
    folder.mkdir(parents=True)
    (folder / "ptb.train.txt").write_text("\n".join(first + later) + "\n")
    (folder / "ptb.valid.txt").write_text("a f g\nh i zz\n" * 5)
    (folder / "ptb.test.txt").write_text("b j\n" * 5)
    return root


def lm_config(root, **data):
    return Config.from_dict({"data": {"corpus": "ptb", "data_dir": str(root), "bptt": 4, **data},
                             "model": {"cell": "gru", "embedding_dim": 4, "hidden_size": 4},
                             "train": {"epochs": 1, "batch_size": 2}})


@pytest.mark.parametrize("sentence_level", [False, True])
def test_capped_language_model_keeps_the_vocabulary_of_the_whole_training_split(tmp_path, sentence_level):
    root = write_ptb_like(tmp_path)
    full = build_vocab(lm_config(root), load_data(lm_config(root)))
    cfg = lm_config(root, max_train_examples=20 if not sentence_level else 3, sentence_level=sentence_level)
    data = load_data(cfg)
    trained_on = {t for ex in data.splits["train"] for t in ex.tokens}
    assert trained_on < set(full.itos) and "rare" not in trained_on    # the cap did leave words out
    vocab = build_vocab(cfg, data)
    assert vocab.itos == full.itos and "f" in vocab and "rare" in vocab
    assert any("vocabulary is built from the whole training split" in n for n in data.notes)
    # min_count and max_vocab apply to the whole split
    counted = build_vocab(lm_config(root, max_train_examples=20, min_count=2), load_data(cfg))
    assert "rare" not in counted and "f" in counted
    assert len(build_vocab(lm_config(root, max_train_examples=20, max_vocab=5), data)) == 5


def test_capped_classifier_keeps_the_vocabulary_of_the_whole_training_split(tmp_path):
    rows = [f"{'pos' if i % 2 else 'neg'}\tword{i} common" for i in range(40)]
    (tmp_path / "train.tsv").write_text("\n".join(rows) + "\n")
    (tmp_path / "dev.tsv").write_text("pos\tword3 unseen\nneg\tcommon\n")
    d = {"corpus": "tsv", "train_file": str(tmp_path / "train.tsv"), "dev_file": str(tmp_path / "dev.tsv")}
    full = build_vocab(Config.from_dict({"data": d}), load_data(Config.from_dict({"data": d})))
    cfg = Config.from_dict({"data": {**d, "max_train_examples": 5}})
    data = load_data(cfg)
    assert len(data.splits["train"]) == 5
    assert build_vocab(cfg, data).itos == full.itos and len(full) == 2 + 41
    assert unk_rate(data.splits["dev"], full) == pytest.approx(1 / 3)     # "unseen" of 3 tokens


def test_capped_formal_language_keeps_every_symbol():
    d = {"corpus": "dyck", "train_size": 200, "dev_size": 0, "test_size": 20}
    full = build_vocab(Config.from_dict({"data": d}), load_data(Config.from_dict({"data": d})))
    cfg = Config.from_dict({"data": {**d, "max_train_examples": 1}})
    assert build_vocab(cfg, load_data(cfg)).itos == full.itos


def test_lm_head_reports_the_unknown_token_rate_beside_perplexity():
    head = LMHead(3, 6)
    targets = torch.tensor([[2, Vocab.unk_id, 3, 0], [Vocab.unk_id, 4, 0, 0]])
    mask = targets != 0
    batch = Batch(targets.clone(), mask, mask.sum(1), targets)
    with torch.no_grad():
        _, m = head.loss_and_metrics(head(torch.randn(2, 4, 3), batch), batch)
    out = head.finalize(m)
    assert list(out) == ["ppl", "unk_rate"] and out["unk_rate"] == pytest.approx(2 / 5)


def test_training_and_eval_report_the_unknown_token_rate(tmp_path, capsys):
    root = write_ptb_like(tmp_path / "data")
    out = tmp_path / "model"
    out.mkdir()
    res = train_run(lm_config(root, max_train_examples=20), out, progress=True)
    printed = capsys.readouterr().out
    # dev "a f g <eos> h i zz <eos>" x 5: only zz is unknown; test "b j <eos>" x 5: none
    assert "note: vocabulary: 14 entries; <unk> tokens: dev 12.50%, test 0.00%" in printed
    assert res.test["unk_rate"] == 0.0
    records = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    dev = records[0]["dev_unk_rate"]          # of the predicted tokens (the stream's first is not one)
    assert dev == pytest.approx(1 / 8, abs=0.03) and f"dev_unk_rate={dev:.4f}" in printed
    assert main(["eval", "--model", str(out), "--split", "dev"]) == 0
    assert f"unk_rate={dev:.4f}" in capsys.readouterr().out


def test_ptb_vocabulary_is_the_whole_training_split_under_a_budget(shared_data):
    """Real data, vocabulary only: a 2,000-token budget keeps PTB's 10,000 words."""
    cfg = Config.from_dict({"data": {"corpus": "ptb", "data_dir": str(shared_data), "max_train_examples": 2000}})
    data = load_data(cfg)
    assert len(data.splits["train"][0].tokens) == 2000
    vocab = build_vocab(cfg, data)
    assert len(vocab) == 10_001              # 9,999 words, <eos> and <unk> (PTB's own) + <pad>
    assert unk_rate(data.splits["dev"], vocab) == pytest.approx(0.0466, abs=0.002)   # PTB's own <unk> only
