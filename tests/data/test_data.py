import json
from collections import Counter

import pytest
import torch

from rnnlens.data.batching import BatchIterator, Example, bucket_batches, collate
from rnnlens.data.synthetic import FORMS, NEGATIVE, POSITIVE, PolarityCorpus, phrase_label
from rnnlens.data.tokenize import Tokenizer
from rnnlens.data.vocab import Vocab
from rnnlens.errors import RnnlensError


def test_tokenizer_splits_punctuation_and_lowercases():
    assert Tokenizer()("The film, sadly, wasn't GOOD!") == ["the", "film", ",", "sadly", ",", "wasn't", "good", "!"]
    assert Tokenizer(lowercase=False)("Not BAD.") == ["Not", "BAD", "."]
    assert Tokenizer(split_punct=False)("a, b") == ["a,", "b"]
    assert Tokenizer()("well-made  movie") == ["well-made", "movie"]
    assert Tokenizer()("   ") == []


def test_vocab_specials_min_count_max_size_and_json(tmp_path):
    toks = [["a", "b", "a"], ["c", "a", "b"], ["d"]]
    v = Vocab.build(toks)
    assert v.itos[:2] == ["<pad>", "<unk>"] and v.pad_id == 0 and v.unk_id == 1
    assert v.itos[2:] == ["a", "b", "c", "d"]          # by count, ties by first appearance
    assert Vocab.build(toks, min_count=2).itos[2:] == ["a", "b"]
    assert Vocab.build(toks, max_size=4).itos == ["<pad>", "<unk>", "a", "b"]
    assert v.encode(["a", "zzz"]) == [2, 1]
    assert v.encode(["<pad>", "<unk>"]) == [1, 1] and "<pad>" not in v and "<unk>" in v   # <pad> is no word
    v.save(tmp_path / "v.json")
    assert Vocab.load(tmp_path / "v.json").itos == v.itos
    (tmp_path / "bad.json").write_text(json.dumps({"itos": ["x"]}))
    with pytest.raises(RnnlensError):
        Vocab.load(tmp_path / "bad.json")
    (tmp_path / "broken.json").write_text("{")
    with pytest.raises(RnnlensError):
        Vocab.load(tmp_path / "broken.json")


def test_collate_pads_right_with_mask_and_lengths():
    v = Vocab(["a", "b", "c"])
    b = collate([Example(["a", "b", "c"], 1), Example(["b"], 0), Example([], 1)], v)
    assert b.tokens.tolist() == [[2, 3, 4], [3, 0, 0], [0, 0, 0]]
    assert b.mask.tolist() == [[True] * 3, [True, False, False], [False] * 3]
    assert b.lengths.tolist() == [3, 1, 0]
    assert b.targets.tolist() == [1, 0, 1] and b.targets.dtype == torch.long
    assert collate([Example(["a"], 0.5)], v).targets.dtype == torch.float32


def test_bucket_batches_cover_everything_once_and_group_lengths():
    lengths = [(i * 7) % 23 + 1 for i in range(1000)]
    batches = bucket_batches(lengths, 32, shuffle=True, seed=3)
    flat = [i for b in batches for i in b]
    assert sorted(flat) == list(range(1000))
    assert all(len(b) <= 32 for b in batches)
    spread = sum(max(lengths[i] for i in b) - min(lengths[i] for i in b) for b in batches) / len(batches)
    assert spread < 3          # random batches would spread about 20
    assert batches == bucket_batches(lengths, 32, shuffle=True, seed=3)
    assert batches != bucket_batches(lengths, 32, shuffle=True, seed=4)
    s = bucket_batches(lengths, 32, shuffle=False)
    assert [lengths[i] for b in s for i in b] == sorted(lengths)


def test_batch_iterator_new_order_each_epoch_and_len():
    v = Vocab(["a"])
    data = [Example(["a"] * (i % 5 + 1), i % 2) for i in range(100)]
    it = BatchIterator(data, v, 8, shuffle=True, seed=0)
    e1 = [b.tokens.tolist() for b in it]
    e2 = [b.tokens.tolist() for b in it]
    assert sum(len(b) for b in e1) == 100 and len(e1) == len(it)
    assert e1 != e2                                     # epoch 2 is reshuffled
    assert [b.tokens.tolist() for b in BatchIterator(data, v, 8, shuffle=True, seed=0)] == e1
    big = BatchIterator(data * 30, v, 7, shuffle=True, seed=0)   # several buckets
    assert len(list(big)) == len(big)


def test_polarity_corpus_sizes_balance_labels_and_determinism():
    c = PolarityCorpus(seed=0)
    s = c.splits()
    assert {k: len(v) for k, v in s.items()} == {"train": 4120, "dev": 200, "test": 200}
    for split in s.values():
        assert Counter(ex.label for ex in split) == {0: len(split) // 2, 1: len(split) // 2}
    assert [e.tokens for e in s["train"][:50]] == [e.tokens for e in PolarityCorpus(seed=0).split("train")[:50]]
    assert [e.tokens for e in s["train"][:50]] != [e.tokens for e in PolarityCorpus(seed=1).split("train")[:50]]
    assert len(POSITIVE) == 10 and len(NEGATIVE) == 12


def _phrase_of(tokens):
    """The (adjective, form) ending a sentence of the corpus."""
    adj = tokens[-1]
    k = 0
    while k < 2 and tokens[-2 - k] == "not":
        k += 1
    return adj, FORMS[k]


def test_polarity_corpus_labels_follow_negation():
    train = PolarityCorpus(seed=0).split("train")
    seen = Counter()
    for ex in train:
        adj, form = _phrase_of(ex.tokens)
        assert adj in POSITIVE + NEGATIVE
        assert ex.label == phrase_label(adj, form)
        seen[form] += 1
    assert set(seen) == set(FORMS)
    assert phrase_label("good", "token") == 1 and phrase_label("good", "negation") == 0
    assert phrase_label("bad", "double_negation") == 0 and phrase_label("bad", "negation") == 1
    # Every one of the 66 phrases occurs in training.
    assert len({_phrase_of(ex.tokens) for ex in train}) == 66


def test_polarity_corpus_can_leave_double_negation_out_of_training():
    c = PolarityCorpus(seed=0, double_negation_in_train=False)
    assert all(_phrase_of(ex.tokens)[1] != "double_negation" for ex in c.split("train"))
    assert any(_phrase_of(ex.tokens)[1] == "double_negation" for ex in c.split("test"))
    assert len(c.split("train")) == 4120
